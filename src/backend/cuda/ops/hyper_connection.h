// mHC (manifold hyper-connection) on the device, matching deepseek_v4::HyperConnection{Pre,
// Post,Head} followed by cpu::RmsNorm. fp32 streams and math; the collapsed row comes out in
// bf16 already normed (the un-normed sum is never materialised).
//
// Every launcher is asynchronous on `stream`, allocates nothing, never synchronises and
// launches a grid fixed by the shapes, so a call can be captured into a CUDA graph and the
// inputs rewritten in place between replays. InvalidArgument (naming the tensor) for bad
// shapes, dtypes, devices, alignment or a workspace that is too small; Internal when the
// launch fails. Outputs are unspecified after a failed launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

// f32 elements of `workspace` a collapse of `num_tokens` rows needs (pre: num_mixes =
// (2 + hc) * hc; head: num_mixes = hc). Monotone in num_tokens: one buffer sized for the
// largest batch serves every smaller one, and pre and head may share it (they are ordered
// on the stream). `batch_invariant`: for collapses with that flag (more splits past batch 1).
int64_t HyperConnectionWorkspaceFloats(int64_t num_tokens, int64_t hc, int64_t dim, int64_t num_mixes,
                                       bool batch_invariant = false);

// The collapse before a sub-layer (hc_attn / hc_ffn) fused with the norm after it
// (attn_norm / ffn_norm). M = (2 + hc) * hc.
struct HcPreArgs {
  Tensor streams;      // [N, hc, D] f32, D a multiple of 8, <= 8192; hc in 1..8
  Tensor fn;           // [M, hc * D] f32
  Tensor base;         // [M] f32
  Tensor scale;        // [3] f32
  Tensor norm_weight;  // [D] f32
  Tensor workspace;    // [W] f32, W >= HyperConnectionWorkspaceFloats(N, hc, D, M); scratch
  Tensor x;            // [N, D] bf16 out: RMSNorm(sum_i pre_i * streams[t, i]) * norm_weight
  Tensor post;         // [N, hc] f32 out
  Tensor comb;         // [N, hc, hc] f32 out
  float hc_eps = 1e-6f;
  float rms_norm_eps = 1e-6f;  // the mixes' prenorm and the fused norm, as the model uses it
  int sinkhorn_iters = 20;     // >= 1
  // Split hc*D as at batch 1 at every batch size, so a row's sums do not depend on the batch
  // (--enable-deterministic-inference); the workspace is sized with the same flag.
  bool batch_invariant = false;
};
Status HyperConnectionPre(const HcPreArgs& args, cudaStream_t stream);

// The expansion after a sub-layer:
//   streams[t, k, :] = post[t, k] * f[t, :] + sum_j comb[t, j, k] * streams_old[t, j, :]
// With `moe_y` given instead of f (f absent), f is the routed experts' combine, the bf16 row
// MoeCombine would write from the same four tensors, formed inside the expansion (one
// launch fewer after a MoE sub-layer whose output needs no all-reduce).
struct HcPostArgs {
  Tensor streams;  // [N, hc, D] f32, updated in place
  Tensor f;        // [N, D] bf16, the sub-layer's output; or absent with moe_y
  Tensor post;     // [N, hc] f32
  Tensor comb;     // [N, hc, hc] f32
  Tensor moe_y;             // [N * K, D] f32 expert outputs by assignment, or absent
  Tensor moe_topk_ids;      // [N, K] i32: assignments with id < 0 are skipped
  Tensor moe_topk_weights;  // [N, K] f32
  Tensor moe_shared;        // [N, D] bf16 shared expert output, or absent
};
Status HyperConnectionPost(const HcPostArgs& args, cudaStream_t stream);

// The final collapse (sigmoid weights, no Sinkhorn) fused with the final norm, over the rows
// that need logits: output row r reads streams row rows[r] (a row outside [0, S) gives a
// zero input row), or row r when `rows` is absent (R = S).
struct HcHeadArgs {
  Tensor streams;      // [S, hc, D] f32
  Tensor rows;         // [R] i32, or absent (null data)
  Tensor fn;           // [hc, hc * D] f32
  Tensor base;         // [hc] f32
  Tensor scale;        // [1] f32
  Tensor norm_weight;  // [D] f32
  Tensor workspace;    // [W] f32, W >= HyperConnectionWorkspaceFloats(R, hc, D, hc); scratch
  Tensor y;            // [R, D] bf16 out
  float hc_eps = 1e-6f;
  float rms_norm_eps = 1e-6f;
  bool batch_invariant = false;  // as HcPreArgs
};
Status HyperConnectionHead(const HcHeadArgs& args, cudaStream_t stream);

// The mean of each row's hc streams, in bf16, into columns [column, column + D) of `out`
// (the block drafter's taps: one column block per target layer). Rounded as the CPU model's
// float loop (sum in lane order, then divide by hc), then to bf16.
struct HcLaneMeanArgs {
  Tensor streams;  // [N, hc, D] f32
  Tensor out;      // [N, W] bf16, W >= column + D
  int64_t column = 0;  // a multiple of 8
};
Status HyperConnectionLaneMean(const HcLaneMeanArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
