// The routed experts' GEMMs over assignments grouped by expert (see moe_router.cuh for the
// bookkeeping): gate-up (two matrices, SwiGLU with V4's clamps, bf16 out) and down (one
// matrix, f32 out). Weights are bf16 or MXFP4 (e2m1 two per byte, the low nibble the even
// input, one ue8m0 scale per 32 inputs).
//
// Built for decode, where it is bound by the weight bytes: a persistent grid walks the
// (touched expert, output row) pairs one warp at a time; each warp streams its weight row
// once per group of up to kMoeTokenGroup of the expert's assignments (16-byte loads that
// skip L1), reading the activations through L1, with fp32 accumulation. Untouched experts
// cost nothing. Prefill is correct but runs on CUDA cores (no tensor-core path yet).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

enum class MoeWeightFormat : uint8_t {
  kBF16,
  kMxfp4,
};

inline constexpr int kMoeTokenGroup = 4;  // assignments sharing one pass over a weight row

struct MoeExpertGemmParams {
  const void* x;                      // [rows, in_dim] bf16: tokens (gate-up) or assignments (down)
  int input_row_divisor = 1;          // assignment a reads row a / divisor (K for gate-up, 1 for down)
  const void* w_a;                    // [E, out_dim, in_dim] bf16 | [E, out_dim, in_dim / 2] packed e2m1
  const uint8_t* scale_a;             // [E, out_dim, in_dim / 32] ue8m0 (MXFP4 only)
  const void* w_b;                    // gate-up only: the up matrix (w3), laid out as w_a
  const uint8_t* scale_b;             // gate-up only, MXFP4 only
  const int32_t* expert_offsets;      // [E + 1]
  const int32_t* sorted_assignments;  // [num_assignments]
  void* out;                          // [num_assignments, out_dim]: bf16 (gate-up) | f32 (down)
  int num_experts = 0;                // E <= kMoeMaxExperts
  int out_dim = 0;                    // I (gate-up) | D (down)
  int in_dim = 0;                     // D (gate-up) | I (down); a multiple of 32
  float swiglu_limit = 0.0f;          // gate-up: <= 0 disables the clamps
  MoeWeightFormat format = MoeWeightFormat::kBF16;
  int num_ctas = 0;                   // persistent grid size; 0: one full wave of the device
};

// out[a, i] = SiLU(min(g, limit)) * clamp(u, -limit, limit), g = x[a/K] . w1[e, i],
// u = x[a/K] . w3[e, i], for every assignment a of every expert e.
cudaError_t LaunchMoeGateUp(const MoeExpertGemmParams& p, cudaStream_t stream);
// out[a, j] = h[a] . w2[e, j].
cudaError_t LaunchMoeDown(const MoeExpertGemmParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
