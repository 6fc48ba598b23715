#include <cuda_bf16.h>

#include "kernels/all_reduce.cuh"
#include "kernels/common/warp.cuh"

namespace peregrine::kernels {

namespace {

__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block blockIdx.x of every rank meets the same block of the others: what this block wrote
// before is visible to theirs after. Thread t signals rank t and waits for rank t's signal.
// A peer may already be at its next call's meeting (it saw this one's signals and went on)
// and have overwritten its signal with the next flag, so the wait is for "at least this
// call" (flags only grow; the difference is taken modulo 2^32).
__device__ __forceinline__ void Meet(const AllReduceParams& p, int meeting, uint32_t flag) {
  __syncthreads();
  if (threadIdx.x < p.size) {
    __threadfence_system();
    StoreRelease(&p.signals[threadIdx.x]->arrived[meeting][blockIdx.x][p.rank], flag);
    const uint32_t* mine = &p.signals[p.rank]->arrived[meeting][blockIdx.x][threadIdx.x];
    const uint64_t start = GlobalTimer();
    while (static_cast<int32_t>(LoadAcquire(mine) - flag) < 0) {
      if (GlobalTimer() - start > p.timeout_ns) __trap();  // a peer is gone or diverged
    }
  }
  __syncthreads();
}

// Pack i (16 bytes) summed over the ranks' staging halves, in rank order.
template <typename T>
__device__ __forceinline__ uint4 SumPack(const AllReduceParams& p, int64_t half, int64_t i) {
  constexpr int kN = 16 / sizeof(T);
  float acc[kN];
  for (int r = 0; r < p.size; ++r) {
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(static_cast<const char*>(p.staging[r]) + half) + i);
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int j = 0; j < kN; ++j) acc[j] = r == 0 ? ToFloat(e[j]) : acc[j] + ToFloat(e[j]);
  }
  uint4 out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int j = 0; j < kN; ++j) o[j] = FromFloat<T>(acc[j]);
  return out;
}

// The grid is always kAllReduceBlocks wide and pack i always block (i / threads) % blocks's,
// whatever the count or algorithm: every block's call counter moves in step on all ranks, and
// the writes of a call into one staging half touch only packs whose readers (the same block
// of each peer) have finished the call before, which this block met them in.
template <typename T>
__global__ void __launch_bounds__(kAllReduceThreads) AllReduceKernel(const AllReduceParams p) {
  __shared__ uint32_t flag_s;
  if (threadIdx.x == 0) flag_s = p.signals[p.rank]->calls[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t flag = flag_s;
  const int64_t packs = p.count * static_cast<int64_t>(sizeof(T)) / 16;
  const int64_t half = (flag & 1) * (p.staging_bytes / 2);
  uint4* own = reinterpret_cast<uint4*>(static_cast<char*>(p.staging[p.rank]) + half);
  uint4* buf = static_cast<uint4*>(p.buf);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p.algorithm == AllReduceAlgorithm::kOneShot) {
    for (int64_t i = first; i < packs; i += stride) __stcg(own + i, buf[i]);
    Meet(p, 0, flag);
    for (int64_t i = first; i < packs; i += stride) buf[i] = SumPack<T>(p, half, i);
  } else {
    // Slice s is packs [s * packs / size, (s + 1) * packs / size); its loops visit only the
    // packs of this block's stride class, as the one-shot loops do.
    const auto slice_first = [&](int s) {
      const int64_t lo = s * packs / p.size;
      return lo + ((first - lo) % stride + stride) % stride;
    };
    for (int64_t i = first; i < packs; i += stride) __stcg(own + i, buf[i]);
    Meet(p, 0, flag);
    for (int64_t i = slice_first(p.rank); i < (p.rank + 1) * packs / p.size; i += stride) {
      const uint4 v = SumPack<T>(p, half, i);
      __stcg(own + i, v);
      buf[i] = v;
    }
    Meet(p, 1, flag);
    for (int s = 0; s < p.size; ++s) {
      if (s == p.rank) continue;
      const uint4* theirs = reinterpret_cast<const uint4*>(static_cast<const char*>(p.staging[s]) + half);
      for (int64_t i = slice_first(s); i < (s + 1) * packs / p.size; i += stride) buf[i] = __ldcg(theirs + i);
    }
  }
  if (threadIdx.x == 0) p.signals[p.rank]->calls[blockIdx.x] = flag;
}

}  // namespace

int AllReduceElementBytes(AllReduceElement element) { return element == AllReduceElement::kF32 ? 4 : 2; }

cudaError_t LaunchAllReduce(const AllReduceParams& p, cudaStream_t stream) {
  if (p.size < 1 || p.size > kAllReduceMaxRanks || p.rank < 0 || p.rank >= p.size || p.count < 0)
    return cudaErrorInvalidValue;
  const int64_t bytes = p.count * AllReduceElementBytes(p.element);
  if (p.count == 0 || p.size == 1) return cudaSuccess;  // the sum of one rank is its input
  if (p.buf == nullptr || bytes % 16 != 0 || 2 * bytes > p.staging_bytes || p.staging_bytes % 32 != 0)
    return cudaErrorInvalidValue;
  for (int r = 0; r < p.size; ++r)
    if (p.staging[r] == nullptr || p.signals[r] == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(kAllReduceBlocks);
  if (p.element == AllReduceElement::kF32)
    AllReduceKernel<float><<<grid, kAllReduceThreads, 0, stream>>>(p);
  else
    AllReduceKernel<__nv_bfloat16><<<grid, kAllReduceThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace peregrine::kernels
