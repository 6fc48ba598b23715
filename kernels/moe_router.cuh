// The token-side MoE ops: routing (scores -> top-K experts and weights), the expert
// bookkeeping (assignments grouped by expert) and the weighted combine of the experts'
// outputs. The expert GEMMs between them are in moe_grouped_gemm.cuh.
//
// An assignment is a = t * K + k: token t's k-th chosen expert. Every buffer indexed by
// assignment ([N * K, ...]) is written and read by `a`, so no permutation is ever applied.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kMoeMaxExperts = 512;
inline constexpr int kMoeMaxTopK = 16;

struct MoeRouteParams {
  const float* logits;        // [N, E] gate GEMM output
  const float* bias;          // [E] selection bias (learned routing), or null for hash routing
  const int32_t* tid2eid;     // [vocab, K] (hash routing), or null
  const int32_t* token_ids;   // [N] (hash routing), or null
  int32_t* topk_ids;          // [N, K]; -1 where a hash entry or token id is out of range
  float* topk_weights;        // [N, K]; 0 where the id is -1
  int num_tokens = 0;         // N
  int num_experts = 0;        // E <= kMoeMaxExperts
  int top_k = 0;              // K <= kMoeMaxTopK
  int64_t vocab_size = 0;     // rows of tid2eid
  float routed_scaling_factor = 1.0f;
  // Expert parallel: only experts [local_begin, local_begin + local_count) are this rank's;
  // their ids are written as id - local_begin, every other one as -1 (weights unchanged).
  // local_count 0: all experts, ids as chosen.
  int local_begin = 0;
  int local_count = 0;
};

// One warp per token: s = sqrt(softplus(logit)); learned: the top-K of s + bias, ties to the
// lower expert; hash: tid2eid[token]. weight = s * scale / (sum of the chosen s + 1e-20),
// the sum taken in k order.
cudaError_t LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream);

struct MoeAlignParams {
  const int32_t* topk_ids;      // [N * K]; ids outside [0, E) are left out
  int32_t* expert_offsets;      // [E + 1] assignments of expert e are [offsets[e], offsets[e+1])
  int32_t* sorted_assignments;  // [N * K] grouped by expert, ascending inside each expert;
                                // entries past offsets[E] are not written
  int num_assignments = 0;      // N * K
  int num_experts = 0;          // E
};

// One block per expert; each block reads all ids twice (count of lower experts, then the
// ordered compaction of its own), so the result is deterministic without atomics.
cudaError_t LaunchMoeAlign(const MoeAlignParams& p, cudaStream_t stream);

// Both of the above in one launch of one block for 2 or more tokens and num_assignments <=
// kMoeFusedAlignMax (align.topk_ids must be route.topk_ids); the same outputs. Larger batches,
// and one token, launch the two: in a decode graph at one token the fused block cost a layer
// 3 us (bench/model/NOTES.md, "Batch 1: fewer launches on a layer's path").
inline constexpr int kMoeFusedAlignMax = 64;
cudaError_t LaunchMoeRouteAlign(const MoeRouteParams& route, const MoeAlignParams& align, cudaStream_t stream);

struct MoeCombineParams {
  const float* y;             // [N * K, D] expert outputs by assignment
  const float* topk_weights;  // [N, K]
  const int32_t* topk_ids;    // [N, K]; assignments with id < 0 are skipped
  const void* shared;         // [N, D] bf16 shared expert output, or null
  void* out;                  // [N, D] bf16
  int num_tokens = 0;         // N
  int top_k = 0;              // K
  int dim = 0;                // D, a multiple of 8
};

// out[t] = sum_k w[t,k] * y[t*K+k] (fp32, k ascending) + shared[t], rounded to bf16 once.
cudaError_t LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
