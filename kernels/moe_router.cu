#include "kernels/moe_router.cuh"

#include <cuda_bf16.h>

#include <cmath>

#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/moe_combine.cuh"

namespace peregrine::kernels {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRouteWarps = 4;
constexpr int kSlotsPerLane = kMoeMaxExperts / kWarpSize;
constexpr int kAlignThreads = 256;
constexpr int kAlignWarps = kAlignThreads / kWarpSize;
constexpr int kCombineThreads = 256;

// sqrt(softplus(x)) with torch's threshold of 20, as the CPU reference computes it.
__device__ __forceinline__ float RouterScore(float logit) {
  const float softplus = logit > 20.0f ? logit : log1pf(expf(logit));
  return sqrtf(softplus);
}

// The selection order: higher key first, then the lower expert; -1 (no candidate) is last.
__device__ __forceinline__ bool IsBetter(float key, int expert, float other_key, int other_expert) {
  if (expert < 0) return false;
  if (other_expert < 0) return true;
  return key > other_key || (key == other_key && expert < other_expert);
}

// Token t's routing by one whole warp (shuffles over every lane).
__device__ __forceinline__ void RouteToken(const MoeRouteParams& p, int t, int lane) {
  const float* logits = p.logits + static_cast<int64_t>(t) * p.num_experts;
  const int num_experts = p.num_experts;
  const int top_k = p.top_k;
  int my_expert = -1;  // lane k < K ends up holding the k-th choice
  float my_score = 0.0f;

  if (p.bias != nullptr) {
    // Lane l holds experts l, l + 32, ...: ascending expert order within the lane.
    float key[kSlotsPerLane], score[kSlotsPerLane];
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) {
      const int e = lane + j * kWarpSize;
      score[j] = 0.0f;
      key[j] = 0.0f;
      if (e < num_experts) {
        score[j] = RouterScore(logits[e]);
        key[j] = score[j] + p.bias[e];
      }
    }
    uint32_t taken = 0;  // bit j: expert lane + 32 j already chosen
    for (int k = 0; k < top_k; ++k) {
      float best_key = 0.0f, best_score = 0.0f;
      int best = -1;
#pragma unroll
      for (int j = 0; j < kSlotsPerLane; ++j) {
        const int e = lane + j * kWarpSize;
        if (e < num_experts && ((taken >> j) & 1u) == 0 && (best < 0 || key[j] > best_key)) {
          best_key = key[j];
          best_score = score[j];
          best = e;
        }
      }
      // A strict total order, so every lane ends with the same winner.
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other_key = __shfl_xor_sync(kFullMask, best_key, offset);
        const float other_score = __shfl_xor_sync(kFullMask, best_score, offset);
        const int other = __shfl_xor_sync(kFullMask, best, offset);
        if (IsBetter(other_key, other, best_key, best)) {
          best_key = other_key;
          best_score = other_score;
          best = other;
        }
      }
      if (best >= 0 && best % kWarpSize == lane) taken |= 1u << (best / kWarpSize);
      if (lane == k) {
        my_expert = best;
        my_score = best_score;
      }
    }
  } else if (lane < top_k) {
    const int32_t token = p.token_ids[t];
    if (token >= 0 && token < p.vocab_size) {
      const int32_t e = p.tid2eid[static_cast<int64_t>(token) * top_k + lane];
      if (e >= 0 && e < num_experts) {
        my_expert = e;
        my_score = RouterScore(logits[e]);
      }
    }
  }

  float sum = 0.0f;  // in k order, as the reference adds
  for (int k = 0; k < top_k; ++k) sum += __shfl_sync(kFullMask, my_score, k);
  const float norm = p.routed_scaling_factor / (sum + 1e-20f);
  if (lane < top_k) {
    const int64_t a = static_cast<int64_t>(t) * top_k + lane;
    int id = my_expert;
    if (p.local_count > 0 && id >= 0)
      id = id >= p.local_begin && id < p.local_begin + p.local_count ? id - p.local_begin : -1;
    p.topk_ids[a] = id;
    p.topk_weights[a] = my_expert >= 0 ? my_score * norm : 0.0f;
  }
}

__global__ void __launch_bounds__(kRouteWarps* kWarpSize) MoeRouteKernel(const MoeRouteParams p) {
  StartAfterPredecessor();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int t = static_cast<int>(blockIdx.x) * kRouteWarps + static_cast<int>(threadIdx.x) / kWarpSize;
  if (t >= p.num_tokens) return;  // the whole warp leaves together
  RouteToken(p, t, lane);
}

// Routing and alignment of a few tokens in one block: each warp routes tokens, then, over the
// ids in shared memory, each expert's offset counts the valid ids below it and each
// assignment's slot is its expert's offset plus the earlier assignments of that expert: what
// MoeAlignKernel computes, without its second launch.
__global__ void __launch_bounds__(kAlignThreads) MoeRouteAlignKernel(const MoeRouteParams p, const MoeAlignParams a) {
  StartAfterPredecessor();
  __shared__ int32_t ids[kMoeFusedAlignMax];
  const int tid = static_cast<int>(threadIdx.x);
  for (int t = tid / kWarpSize; t < p.num_tokens; t += kAlignWarps) RouteToken(p, t, tid % kWarpSize);
  __syncthreads();  // this block's id writes are visible to the block
  const int n = a.num_assignments;
  for (int i = tid; i < n; i += kAlignThreads) ids[i] = a.topk_ids[i];
  __syncthreads();
  const int num_experts = a.num_experts;
  auto below = [&](int e) {
    int count = 0;
    for (int i = 0; i < n; ++i) count += ids[i] >= 0 && ids[i] < e;
    return count;
  };
  for (int e = tid; e <= num_experts; e += kAlignThreads) a.expert_offsets[e] = below(e);
  for (int i = tid; i < n; i += kAlignThreads) {
    const int32_t id = ids[i];
    if (id < 0 || id >= num_experts) continue;
    int slot = below(id);
    for (int j = 0; j < i; ++j) slot += ids[j] == id;
    a.sorted_assignments[slot] = i;
  }
}

__device__ __forceinline__ int WarpSumInt(int v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__global__ void __launch_bounds__(kAlignThreads) MoeAlignKernel(const MoeAlignParams p) {
  StartAfterPredecessor();
  __shared__ int warp_counts[2][kAlignWarps];
  const int e = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int n = p.num_assignments;

  // Pass 1: assignments of lower experts (this expert's offset) and of this expert.
  int below = 0, mine = 0;
  for (int a = tid; a < n; a += kAlignThreads) {
    const int32_t id = p.topk_ids[a];
    below += id >= 0 && id < e;
    mine += id == e;
  }
  below = WarpSumInt(below);
  mine = WarpSumInt(mine);
  if (lane == 0) {
    warp_counts[0][warp] = below;
    warp_counts[1][warp] = mine;
  }
  __syncthreads();
  int base = 0, count = 0;
#pragma unroll
  for (int w = 0; w < kAlignWarps; ++w) {
    base += warp_counts[0][w];
    count += warp_counts[1][w];
  }
  if (tid == 0) {
    p.expert_offsets[e] = base;
    if (e == p.num_experts - 1) p.expert_offsets[e + 1] = base + count;
  }
  if (count == 0) return;  // uniform over the block
  __syncthreads();         // warp_counts is reused below

  // Pass 2: ordered compaction of this expert's assignments.
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int a0 = 0; a0 < n; a0 += kAlignThreads) {
    const int a = a0 + tid;
    const bool match = a < n && p.topk_ids[a] == e;
    const uint32_t ballot = __ballot_sync(kFullMask, match);
    if (lane == 0) warp_counts[0][warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kAlignWarps; ++w) {
      const int c = warp_counts[0][w];
      total += c;
      before += w < warp ? c : 0;
    }
    if (match) p.sorted_assignments[base + before + __popc(ballot & lanes_below)] = a;
    base += total;
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kCombineThreads) MoeCombineKernel(const MoeCombineParams p) {
  StartAfterPredecessor();
  const int chunks_per_row = p.dim / 8;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kCombineThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(p.num_tokens) * chunks_per_row) return;
  const int64_t t = i / chunks_per_row;
  const int c = static_cast<int>(i - t * chunks_per_row) * 8;
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + t * p.dim + c) =
      CombineEight(p.y, p.topk_weights, p.topk_ids, p.shared, p.top_k, p.dim, t, c);
}

}  // namespace

cudaError_t LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.num_experts <= 0 || p.num_experts > kMoeMaxExperts || p.top_k <= 0 || p.top_k > kMoeMaxTopK ||
      p.top_k > p.num_experts)
    return cudaErrorInvalidValue;
  if (p.bias == nullptr && (p.tid2eid == nullptr || p.token_ids == nullptr)) return cudaErrorInvalidValue;
  const int blocks = (p.num_tokens + kRouteWarps - 1) / kRouteWarps;
  return LaunchDependent(MoeRouteKernel, LaunchShape{dim3(blocks), dim3(kRouteWarps * kWarpSize)}, stream, p);
}

cudaError_t LaunchMoeAlign(const MoeAlignParams& p, cudaStream_t stream) {
  if (p.num_experts <= 0 || p.num_assignments < 0) return cudaErrorInvalidValue;
  return LaunchDependent(MoeAlignKernel, LaunchShape{dim3(p.num_experts), dim3(kAlignThreads)}, stream, p);
}

cudaError_t LaunchMoeRouteAlign(const MoeRouteParams& route, const MoeAlignParams& align, cudaStream_t stream) {
  if (align.num_assignments > kMoeFusedAlignMax || route.num_tokens <= 1) {
    const cudaError_t err = LaunchMoeRoute(route, stream);
    return err != cudaSuccess ? err : LaunchMoeAlign(align, stream);
  }
  if (route.num_experts <= 0 || route.num_experts > kMoeMaxExperts || route.top_k <= 0 ||
      route.top_k > kMoeMaxTopK || route.top_k > route.num_experts || align.num_experts <= 0 ||
      align.num_assignments != route.num_tokens * route.top_k || align.topk_ids != route.topk_ids)
    return cudaErrorInvalidValue;
  if (route.bias == nullptr && (route.tid2eid == nullptr || route.token_ids == nullptr)) return cudaErrorInvalidValue;
  return LaunchDependent(MoeRouteAlignKernel, LaunchShape{dim3(1), dim3(kAlignThreads)}, stream, route, align);
}

cudaError_t LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.dim <= 0 || p.dim % 8 != 0 || p.top_k <= 0) return cudaErrorInvalidValue;
  const int64_t chunks = static_cast<int64_t>(p.num_tokens) * (p.dim / 8);
  const int64_t blocks = (chunks + kCombineThreads - 1) / kCombineThreads;
  return LaunchDependent(MoeCombineKernel, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kCombineThreads)}, stream, p);
}

}  // namespace peregrine::kernels
