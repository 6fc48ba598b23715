// The routed-expert MoE on the device, as four ops the model runner chains (plus the gate GEMM
// before and the shared expert beside them):
//   MoeRoute   logits -> topk_ids, topk_weights
//   MoeAlign   topk_ids -> expert_offsets, sorted_assignments (assignments grouped by expert)
//   MoeGateUp  x, w1, w3 -> h = SwiGLU with V4's clamps, one row per assignment
//   MoeDown    h, w2 -> y, one row per assignment
//   MoeCombine y, topk_weights (+ shared expert output) -> out
// An assignment a = t * K + k is token t's k-th expert; rows of h and y are indexed by it.
// Semantics are those of deepseek_v4::Moe (src/model/deepseek_v4/moe.cc).
//
// Every launcher checks its tensors (names, dtypes, shapes, device, alignment) and returns
// InvalidArgument naming the tensor, Internal when the launch fails. All are asynchronous on
// `stream` and capture-safe: no host sync, no allocation, grids sized from the tensor shapes
// (host-known maxima), every data-dependent count read on the device. Nothing is written
// when a check fails.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"
#include "kernels/moe_grouped_gemm.cuh"

namespace peregrine::cuda {

using kernels::MoeMxfp4Kernel;
using kernels::MoeWeightFormat;

struct MoeRouteArgs {
  Tensor logits;        // [N, E] f32, the gate GEMM output; E <= 512
  Tensor bias;          // [E] f32: learned routing (top-K of score + bias) ...
  Tensor tid2eid;       // [V, K] i32: ... or hash routing, with token_ids; exactly one mode
  Tensor token_ids;     // [N] i32 (hash routing)
  Tensor topk_ids;      // [N, K] i32 out; K <= 16. -1 for out-of-range hash entries / tokens
  Tensor topk_weights;  // [N, K] f32 out; 0 where the id is -1
  float routed_scaling_factor = 1.0f;
  // Expert parallel: this rank's experts [local_begin, local_begin + local_count) are written
  // as local ids (id - local_begin), the others as -1 with their weights kept (MoeAlign and
  // MoeCombine skip them). local_count 0, or E: every expert, ids as chosen.
  int local_begin = 0;
  int local_count = 0;
};

// s = sqrt(softplus(logit)); ids: top-K of s + bias (ties to the lower expert) or
// tid2eid[token]; weight = s[id] * scale / (sum over k of s[id_k] + 1e-20).
Status MoeRoute(const MoeRouteArgs& args, cudaStream_t stream);

struct MoeAlignArgs {
  Tensor topk_ids;            // [N, K] i32; ids outside [0, E) are left out
  Tensor expert_offsets;      // [E + 1] i32 out: expert e owns sorted_assignments[off[e], off[e+1])
  Tensor sorted_assignments;  // [N * K] i32 out: ascending inside each expert (deterministic)
};

Status MoeAlign(const MoeAlignArgs& args, cudaStream_t stream);

// MoeRoute then MoeAlign over its ids (align.topk_ids is route.topk_ids): for a few tokens
// (kernels::kMoeFusedAlignMax assignments or fewer) one launch of one block does both, with
// the same outputs.
Status MoeRouteAndAlign(const MoeRouteArgs& route, const MoeAlignArgs& align, cudaStream_t stream);

// One stacked expert matrix [E, R, C]: bf16, or MXFP4 (packed e2m1 u8/i8 [E, R, C / 2], the
// low nibble the even column, + ue8m0 u8 scales [E, R, C / 32]). C is a multiple of 32.
struct MoeExpertMatrix {
  Tensor weight;
  Tensor scale;  // MXFP4 only; absent for bf16
};

struct MoeGateUpArgs {
  Tensor x;                   // [N, D] bf16
  Tensor sorted_assignments;  // [N * K] i32 (MoeAlign)
  Tensor expert_offsets;      // [E + 1] i32 (MoeAlign)
  MoeWeightFormat format = MoeWeightFormat::kBF16;
  MoeExpertMatrix w1;         // gate [E, I, D]
  MoeExpertMatrix w3;         // up   [E, I, D]
  Tensor h;                   // [N * K, I] bf16 out; rows of dropped assignments are not written
  float swiglu_limit = 0.0f;  // <= 0: no clamp
  int num_ctas = 0;           // persistent grid; 0: one full wave of the current device
  // One warp per (expert, row tile) at every batch size: the split of the inputs over 2 or 4
  // warps that batch 1 gets otherwise depends on how many experts the batch touches, and
  // changes the order of each sum (--enable-deterministic-inference).
  bool batch_invariant = false;
  // MXFP4 only: kCudaCore forces the CUDA-core kernel (kernels/moe_grouped_gemm.cuh).
  MoeMxfp4Kernel mxfp4_kernel = MoeMxfp4Kernel::kAuto;
};

// h[a] = SiLU(min(g, limit)) * clamp(u, -limit, limit), g = x[a / K] . w1[e], u = x[a / K] . w3[e],
// fp32 accumulation, rounded to bf16 once.
Status MoeGateUp(const MoeGateUpArgs& args, cudaStream_t stream);

struct MoeDownArgs {
  Tensor h;                   // [N * K, I] bf16
  Tensor sorted_assignments;  // [N * K] i32
  Tensor expert_offsets;      // [E + 1] i32
  MoeWeightFormat format = MoeWeightFormat::kBF16;
  MoeExpertMatrix w2;         // down [E, D, I]
  Tensor y;                   // [N * K, D] f32 out; rows of dropped assignments are not written
  int num_ctas = 0;
  bool batch_invariant = false;  // as MoeGateUpArgs (batch 1 splits down's inputs too)
  MoeMxfp4Kernel mxfp4_kernel = MoeMxfp4Kernel::kAuto;
};

// y[a] = h[a] . w2[e] (fp32).
Status MoeDown(const MoeDownArgs& args, cudaStream_t stream);

struct MoeCombineArgs {
  Tensor y;             // [N * K, D] f32
  Tensor topk_ids;      // [N, K] i32: assignments with id < 0 are skipped
  Tensor topk_weights;  // [N, K] f32
  Tensor shared;        // [N, D] bf16 shared expert output, added; or absent
  Tensor out;           // [N, D] bf16
};

// out[t] = sum over k (ascending, fp32) of w[t, k] * y[t * K + k] + shared[t], bf16 once.
Status MoeCombine(const MoeCombineArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
