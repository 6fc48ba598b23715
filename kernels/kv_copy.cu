#include "kernels/kv_copy.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
// The checksum as runtime/kv_page_checksum.h defines it (that CPU reference stays separate:
// the GPU test checks this kernel against it).
constexpr uint64_t kStep = 0x9E3779B97F4A7C15ull;

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__device__ __forceinline__ uint64_t Term(uint64_t v, uint64_t index) { return Mix(v + (index + 1) * kStep); }

// One CTA per segment. Each thread copies words strided by the CTA (coalesced), 16 bytes at a
// time where both ends allow it, sums their terms, and the CTA adds its sum to the page's once.
__global__ void __launch_bounds__(kThreads) KvCopyKernel(const KvCopyParams p) {
  StartAfterPredecessor();
  const KvCopySegment s = p.segments[blockIdx.x];
  const uint64_t n = min(s.words, kKvCopyMaxSegmentWords);
  const uint64_t* src = static_cast<const uint64_t*>(s.src);
  uint64_t* dst = static_cast<uint64_t*>(s.dst);
  uint64_t sum = 0;
  uint64_t w = 0;
  const bool wide = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0;
  if (wide) {
    const uint64_t pairs = n / 2;
    const ulonglong2* src2 = reinterpret_cast<const ulonglong2*>(src);
    ulonglong2* dst2 = reinterpret_cast<ulonglong2*>(dst);
#pragma unroll 4
    for (uint64_t i = threadIdx.x; i < pairs; i += kThreads) {
      const ulonglong2 v = src2[i];
      if (dst2 != nullptr) dst2[i] = v;
      sum += Term(v.x, s.first_word + 2 * i) + Term(v.y, s.first_word + 2 * i + 1);
    }
    w = 2 * pairs;
  }
  for (uint64_t i = w + threadIdx.x; i < n; i += kThreads) {
    const uint64_t v = src[i];
    if (dst != nullptr) dst[i] = v;
    sum += Term(v, s.first_word + i);
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  __shared__ uint64_t warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total = 0;
    for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
    atomicAdd(reinterpret_cast<unsigned long long*>(p.checksums + s.page), static_cast<unsigned long long>(total));
  }
}

}  // namespace

cudaError_t LaunchKvCopy(const KvCopyParams& p, cudaStream_t stream) {
  if (p.num_pages < 0 || p.num_segments < 0 || p.num_segments > INT32_MAX) return cudaErrorInvalidValue;
  if (p.num_pages > 0) {
    const cudaError_t e = cudaMemsetAsync(p.checksums, 0, static_cast<size_t>(p.num_pages) * sizeof(uint64_t), stream);
    if (e != cudaSuccess) return e;
  }
  if (p.num_segments == 0) return cudaSuccess;
  return LaunchDependent(KvCopyKernel, LaunchShape{dim3(static_cast<unsigned>(p.num_segments)), dim3(kThreads)}, stream, p);
}

}  // namespace peregrine::kernels
