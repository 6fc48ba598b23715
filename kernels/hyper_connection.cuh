// mHC (manifold hyper-connection) on the device: the collapse before each sub-layer (mixes,
// Sinkhorn, pre-weighted sum of the streams + the RMSNorm that follows it), the expansion
// after it, and the final collapse before the head. fp32 math throughout.
//
// The collapse is two launches:
//   1. mixes: a skinny GEMM  streams [N, hc*D] . fn^T [hc*D, M]  plus the rows' sum of
//      squares, split along hc*D across CTAs; fp32 partials go to a workspace
//      [num_splits, N, M + 1] (value M of a row is its sum of squares).
//   2. finalize: one CTA per token sums the partials in split order (deterministic), applies
//      the prenorm scale, sigmoid weights, and writes RMSNorm(sum_i pre_i * stream_i) * w;
//      for the sub-layer collapse a second CTA per token runs the Sinkhorn iterations and
//      writes post and comb concurrently.
// Both are launched with programmatic dependent launch (sm_90+), so each may start while its
// predecessor on the stream drains; they wait for it before touching its data.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/host_device.h"

namespace peregrine::kernels {

inline constexpr int kHcMaxMult = 8;
// Widest row (D) the finalize kernel keeps in registers: 256 threads x 8 float4.
inline constexpr int kHcMaxDim = 8192;
// Mixes GEMM tiling: tokens per CTA, hc*D elements per split unit (one shared-memory stage),
// the CTA count aimed at (two resident per SM on 132 SMs).
inline constexpr int kHcTokenTile = 32;
inline constexpr int kHcSplitUnit = 64;
inline constexpr int kHcTargetCtas = 264;

// How the mixes GEMM splits hc*D (`k`) for `num_tokens` rows: `units_per_split` split units of
// kHcSplitUnit per CTA, `num_splits` CTAs along k.
struct HcSplit {
  int64_t num_splits;
  int64_t units_per_split;
};
PG_HOST_DEVICE constexpr HcSplit HcSplitFor(int64_t num_tokens, int64_t k) {
  const int64_t units = (k + kHcSplitUnit - 1) / kHcSplitUnit;
  const int64_t tiles = (num_tokens + kHcTokenTile - 1) / kHcTokenTile;
  int64_t wanted = (kHcTargetCtas + tiles - 1) / (tiles > 0 ? tiles : 1);
  wanted = wanted < 1 ? 1 : (wanted > units ? units : wanted);
  const int64_t per = (units + wanted - 1) / wanted;
  return {(units + per - 1) / per, per};
}

// The split of a batch-invariant collapse (--enable-deterministic-inference): the one batch 1
// gets, at every batch size, so each row's sums run in one order.
PG_HOST_DEVICE constexpr HcSplit HcSplitOf(int64_t num_tokens, int64_t k, bool batch_invariant) {
  return HcSplitFor(batch_invariant ? 1 : num_tokens, k);
}

// f32 elements of workspace the collapse needs for `num_tokens` rows and `num_mixes` mixes.
// Monotone in num_tokens, so a buffer sized for the largest batch serves every smaller one.
PG_HOST_DEVICE constexpr int64_t HcWorkspaceFloats(int64_t num_tokens, int64_t num_mixes, int64_t k) {
  const int64_t units = (k + kHcSplitUnit - 1) / kHcSplitUnit;
  // num_splits * N <= min(units * N, (target / tiles + 1) * N) <= min(units * N, target * tile + N).
  const int64_t a = units * num_tokens;
  const int64_t b = int64_t{kHcTargetCtas} * kHcTokenTile + num_tokens;
  return (num_mixes + 1) * (a < b ? a : b);
}
// The same for the batch-invariant split (also monotone in num_tokens).
PG_HOST_DEVICE constexpr int64_t HcWorkspaceFloatsOf(int64_t num_tokens, int64_t num_mixes, int64_t k,
                                                     bool batch_invariant) {
  return batch_invariant ? (num_mixes + 1) * num_tokens * HcSplitFor(1, k).num_splits
                         : HcWorkspaceFloats(num_tokens, num_mixes, k);
}

// The collapse before a sub-layer (has_comb) or before the head (!has_comb).
struct HcCollapseParams {
  const float* streams;      // [num_stream_rows, hc, D]
  const int32_t* rows;       // [N] stream row per output row, or null for row t -> t
  const float* fn;           // [M, hc*D]   M = (2 + hc) * hc with comb, hc without
  const float* base;         // [M]
  const float* scale;        // [3] with comb, [1] without
  const float* norm_weight;  // [D]
  float* workspace;          // [HcWorkspaceFloats(N, M, hc*D)]
  void* x;                   // [N, D] bf16: RMSNorm(sum_i pre_i * streams[row, i]) * norm_weight
  float* post;               // [N, hc]      (with comb)
  float* comb;               // [N, hc, hc]  (with comb)
  int64_t num_tokens = 0;       // N
  int64_t num_stream_rows = 0;  // rows of `streams`; a `rows` entry outside it reads zeros
  int hc = 0;
  int dim = 0;  // D, a multiple of 8, <= kHcMaxDim
  bool has_comb = false;
  bool batch_invariant = false;  // HcSplitOf: the workspace is HcWorkspaceFloatsOf(..., true)
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
  int sinkhorn_iters = 20;
};

// Both launches. The halves are exposed for the benchmark, which times the mixes GEMM alone;
// LaunchHcFinalize must follow LaunchHcMixes of the same params on the same stream.
cudaError_t LaunchHcCollapse(const HcCollapseParams& p, cudaStream_t stream);
cudaError_t LaunchHcMixes(const HcCollapseParams& p, cudaStream_t stream);
cudaError_t LaunchHcFinalize(const HcCollapseParams& p, cudaStream_t stream);

// streams[t, k, :] = post[t, k] * f[t, :] + sum_j comb[t, j, k] * streams_old[t, j, :]
struct HcExpandParams {
  float* streams;       // [N, hc, D] in place
  const void* f;        // [N, D] bf16, or null when the MoE combine below gives it
  const float* post;    // [N, hc]
  const float* comb;    // [N, hc, hc]
  int64_t num_tokens = 0;
  int hc = 0;
  int dim = 0;  // a multiple of 8
  // With f null: f is the routed experts' combine, the bf16 row LaunchMoeCombine would write
  // (kernels/common/moe_combine.cuh), formed in the expansion instead of read.
  const float* moe_y = nullptr;             // [N * K, D]
  const float* moe_topk_weights = nullptr;  // [N, K]
  const int32_t* moe_topk_ids = nullptr;    // [N, K]; ids < 0 skipped
  const void* moe_shared = nullptr;         // [N, D] bf16 shared expert output, or null
  int moe_top_k = 0;                        // K
};

cudaError_t LaunchHcExpand(const HcExpandParams& p, cudaStream_t stream);

// The mean of a row's hc streams (the block drafter's taps, deepseek_v4::Model::Forward):
// out[t * out_stride + e] = bf16((((0 + s_0) + s_1) + ...) / hc) for e in [0, D), sums and the
// divide rounded as the host's float loop does.
struct HcLaneMeanParams {
  const float* streams;  // [N, hc, D]
  void* out;             // bf16 rows out_stride elements apart, 16-byte aligned
  int64_t out_stride = 0;  // a multiple of 8, >= D
  int64_t num_tokens = 0;
  int hc = 0;
  int dim = 0;  // a multiple of 8
};

cudaError_t LaunchHcLaneMean(const HcLaneMeanParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
