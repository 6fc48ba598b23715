#include "kernels/draft_candidates.cuh"

#include <cstdint>

#include "kernels/common/cluster.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/sampling_detail.cuh"

namespace peregrine::kernels {
namespace {

using sampling_detail::KeyId;
using sampling_detail::KeyLogit;
using sampling_detail::MoreLikelyKey;

constexpr int kThreads = 512;
constexpr int kBatch = 16;  // loads in flight per thread before any is used
constexpr int kWarps = kThreads / 32;
constexpr int kMaxK = kDraftMaxCandidates;
constexpr float kNegInf = -__builtin_huge_valf();
static_assert(kWarps <= 32 && kMaxK <= 32);

// A sorted list of the kList largest keys seen (0: empty; every real key is larger). Its
// length is a template argument, the smallest of 1, 4, 8, 16 that holds K: the per-element
// insert is most of a thread's work, and a chain (K = 1) needs only the maximum.
template <int kList>
struct TopList {
  uint64_t key[kList];
  __device__ TopList() {
#pragma unroll
    for (int i = 0; i < kList; ++i) key[i] = 0;
  }
  __device__ __forceinline__ void Insert(uint64_t k) {
    if (k <= key[kList - 1]) return;
#pragma unroll
    for (int i = kList - 1; i > 0; --i) {
      // Shift down every entry smaller than k; k lands above the first larger one.
      const bool shift = key[i - 1] < k;
      key[i] = shift ? key[i - 1] : (key[i] < k ? k : key[i]);
    }
    if (key[0] < k) key[0] = k;
  }
  __device__ __forceinline__ void Pop() {
#pragma unroll
    for (int i = 0; i < kList - 1; ++i) key[i] = key[i + 1];
    key[kList - 1] = 0;
  }
};

// The warp's `count` largest keys over every lane's list (lanes' lists are consumed); lane 0
// gets them in out[0..count) (the lists' keys are distinct: ids differ).
template <int kList>
__device__ __forceinline__ void WarpTop(TopList<kList>& list, int count, uint64_t* out) {
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < count; ++r) {
    uint64_t best = list.key[0];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const uint64_t o = __shfl_xor_sync(0xffffffffu, best, off);
      best = o > best ? o : best;
    }
    if (best != 0 && list.key[0] == best) list.Pop();
    if (lane == 0) out[r] = best;
  }
}

// Running maximum and sum of exp(v - max) (the log-sum-exp's parts); m = -inf: empty.
struct MaxSum {
  float m = kNegInf;
  float s = 0.0f;
  __device__ __forceinline__ void Add(float v) {
    if (v == kNegInf) return;
    if (v > m) {
      s = (m == kNegInf ? 0.0f : s * expf(m - v)) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  __device__ __forceinline__ void Merge(MaxSum o) {
    if (o.m == kNegInf) return;
    if (m == kNegInf) {
      *this = o;
      return;
    }
    const float top = fmaxf(m, o.m);
    s = s * expf(m - top) + o.s * expf(o.m - top);
    m = top;
  }
};

__device__ __forceinline__ MaxSum WarpMaxSum(MaxSum v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    MaxSum o;
    o.m = __shfl_xor_sync(0xffffffffu, v.m, off);
    o.s = __shfl_xor_sync(0xffffffffu, v.s, off);
    v.Merge(o);
  }
  return v;
}

struct Shared {
  uint64_t warp_keys[kWarps][kMaxK];
  MaxSum warp_sums[kWarps];
  uint64_t keys[kMaxK];  // the CTA's list (rank 0: the row's, after the cluster merge)
  MaxSum sum;
};

// kCluster CTAs per row, each over a contiguous part of it; rank 0 merges the parts. kSum:
// the row's log-sum-exp and the K columns, only when top_tokens is given (the launcher
// chooses it so).
template <int kCluster, int kList, bool kSum>
__global__ void __launch_bounds__(kThreads) DraftCandidatesKernel(const DraftCandidatesParams p) {
  StartAfterPredecessor();
  __shared__ Shared s;
  const int64_t row = blockIdx.x / kCluster;
  const int rank = kCluster > 1 ? ClusterRank() : 0;
  const int n = p.vocab;
  const int part = (n + kCluster - 1) / kCluster;
  const int lo = min(n, rank * part), hi = min(n, lo + part);
  const float* x = p.logits + row * static_cast<int64_t>(n);
  const float* bias = p.bias != nullptr ? p.bias + row * static_cast<int64_t>(n) : nullptr;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  TopList<kList> list;
  MaxSum sum;
  // Batches of kBatch loads per thread, all issued before the first is used: a row part is
  // ~16K logits, two batches a thread, so the pass costs about two memory round trips.
  for (int base = lo + static_cast<int>(threadIdx.x); base < hi; base += kThreads * kBatch) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      v[j] = i < hi ? x[i] : kNegInf;
    }
    if (bias != nullptr) {
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        if (i < hi) v[j] = __fadd_rn(v[j], bias[i]);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      if (i >= hi) break;
      const float t = isnan(v[j]) ? kNegInf : v[j];
      if constexpr (kSum) sum.Add(t);
      list.Insert(MoreLikelyKey(t, i));
    }
  }
  // The warps' lists and sums, then the CTA's (warp 0: lane w holds warp w's list).
  WarpTop(list, p.k, s.warp_keys[warp]);
  if constexpr (kSum) {
    sum = WarpMaxSum(sum);
    if (lane == 0) s.warp_sums[warp] = sum;
  }
  __syncthreads();
  if (warp == 0) {
    TopList<kList> merged;
    MaxSum total;
    if (lane < kWarps) {
#pragma unroll
      for (int i = 0; i < kList; ++i) merged.key[i] = i < p.k ? s.warp_keys[lane][i] : 0;
      if constexpr (kSum) total = s.warp_sums[lane];
    }
    WarpTop(merged, p.k, s.keys);
    if constexpr (kSum) {
      total = WarpMaxSum(total);
      if (lane == 0) s.sum = total;
    }
  }
  if constexpr (kCluster > 1) {
    ClusterSync();  // every CTA's list and sum are in its shared memory
    if (rank == 0 && warp == 0) {
      TopList<kList> merged;
      MaxSum total;
      if (lane < kCluster) {
        const uint64_t* peer = ClusterPeer(s.keys, lane);
#pragma unroll
        for (int i = 0; i < kList; ++i) merged.key[i] = i < p.k ? peer[i] : 0;
        if constexpr (kSum) total = *ClusterPeer(&s.sum, lane);
      }
      __syncwarp();
      // Lane 0 read this CTA's own list above; only it writes the row's list over it.
      WarpTop(merged, p.k, s.keys);
      if constexpr (kSum) {
        total = WarpMaxSum(total);
        if (lane == 0) s.sum = total;
      }
    }
    ClusterSync();  // the peers' shared memory stays until rank 0 has read it
  } else {
    __syncthreads();
  }
  if (rank != 0) return;
  __syncthreads();
  for (int i = threadIdx.x; i < p.k; i += kThreads) {
    const uint64_t key = s.keys[i];
    const bool has = key != 0;
    const float v = has ? KeyLogit(key) : kNegInf;
    const int32_t token = has ? KeyId(key) : -1;
    if (i == 0) p.tokens[row] = token;
    if constexpr (kSum) {  // top_tokens and top_logprobs given
      // As the host's ComputeRawLogprobs: a non-finite maximum is the normalizer itself (a
      // row holding +inf sums inf - inf to NaN, which must not leak), and a difference that
      // is NaN (+inf - +inf, -inf - -inf) is -inf.
      const float log_normalizer = isinf(s.sum.m) ? s.sum.m : s.sum.m + logf(s.sum.s);
      p.top_tokens[row * p.top_pitch + i] = token;
      const float logprob = v - log_normalizer;
      p.top_logprobs[row * p.top_pitch + i] = isnan(logprob) ? kNegInf : logprob;
    }
  }
}

template <int kCluster, int kList, bool kSum>
cudaError_t LaunchShaped(const DraftCandidatesParams& p, cudaStream_t stream) {
  return LaunchDependent(DraftCandidatesKernel<kCluster, kList, kSum>,
                         LaunchShape{dim3(static_cast<unsigned>(p.batch * kCluster)), dim3(kThreads), 0,
                                     dim3(kCluster, 1, 1)},
                         stream, p);
}

template <int kCluster, int kList>
cudaError_t LaunchList(const DraftCandidatesParams& p, cudaStream_t stream) {
  return p.top_tokens != nullptr ? LaunchShaped<kCluster, kList, true>(p, stream)
                                 : LaunchShaped<kCluster, kList, false>(p, stream);
}

template <int kCluster>
cudaError_t Launch(const DraftCandidatesParams& p, cudaStream_t stream) {
  if (p.k == 1) return LaunchList<kCluster, 1>(p, stream);
  if (p.k <= 4) return LaunchList<kCluster, 4>(p, stream);
  if (p.k <= 8) return LaunchList<kCluster, 8>(p, stream);
  return LaunchList<kCluster, kMaxK>(p, stream);
}

}  // namespace

cudaError_t LaunchDraftCandidates(const DraftCandidatesParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.batch * 8 > (int64_t{1} << 31) - 1 || p.vocab <= 0 || p.k < 1 || p.k > kDraftMaxCandidates ||
      p.tokens == nullptr || (p.top_tokens == nullptr) != (p.top_logprobs == nullptr) ||
      (p.top_tokens != nullptr && p.top_pitch < p.k))
    return cudaErrorInvalidValue;
  // A row is one pass over V logits: at small batches one CTA per row would leave most SMs
  // idle, so on sm_90 a cluster of 8 CTAs splits it (a refused cluster launch falls back).
  int device = 0, major = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  if (major >= 9 && !p.one_cta_per_row) {
    if (Launch<8>(p, stream) == cudaSuccess) return cudaSuccess;
    (void)cudaGetLastError();
  }
  return Launch<1>(p, stream);
}

}  // namespace peregrine::kernels
