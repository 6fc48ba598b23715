// The routed experts' GEMMs over assignments grouped by expert (see moe_router.cuh for the
// bookkeeping): gate-up (two matrices, SwiGLU with V4's clamps, bf16 out) and down (one
// matrix, f32 out). Weights are bf16 or MXFP4 (e2m1 two per byte, the low nibble the even
// input, one ue8m0 scale per 32 inputs).
//
// Built for decode, where it is bound by the weight bytes. MXFP4 weights (whole 16-row tiles,
// devices that give a CTA ~210 KiB of shared memory: H100/H200) run on tensor cores
// (moe_grouped_gemm_mma.cuh): a persistent grid walks the (touched expert, 16-row tile) pairs
// one warp at a time (2 or 4 warps splitting the inputs when there are few pairs, e.g. batch
// 1), streaming the rows through a per-warp cp.async ring in runs of 128-256 bytes per row,
// decoding e2m1 exactly to bf16 MMA fragments, the expert's assignments as the N side in
// passes of up to 16. bf16 weights (and MXFP4 anywhere else) take the CUDA-core kernel:
// (touched expert, output row) pairs one warp at a time, each weight row streamed once per
// group of up to kMoeTokenGroup assignments with 16-byte loads that skip L1. Both read
// activations through L1 and accumulate in fp32; untouched experts cost nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

enum class MoeWeightFormat : uint8_t {
  kBF16,
  kMxfp4,
};

inline constexpr int kMoeTokenGroup = 4;  // assignments sharing one pass over a weight row

// Which kernel serves MXFP4 weights. kAuto takes the tensor-core kernel where the device has
// one (H100/H200) and the CUDA-core kernel elsewhere; kCudaCore forces the CUDA-core kernel
// (tests, the benchmark's peer). The CUDA-core kernel was measured slower at every batch,
// 1 included, on an H100 (bench/moe/NOTES.md). bf16 weights always take the CUDA-core kernel.
enum class MoeMxfp4Kernel : uint8_t {
  kAuto,
  kCudaCore,
};

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
  bool batch_invariant = false;       // never split an item's inputs over warps
  MoeMxfp4Kernel mxfp4_kernel = MoeMxfp4Kernel::kAuto;
};

// out[a, i] = SiLU(min(g, limit)) * clamp(u, -limit, limit), g = x[a/K] . w1[e, i],
// u = x[a/K] . w3[e, i], for every assignment a of every expert e.
cudaError_t LaunchMoeGateUp(const MoeExpertGemmParams& p, cudaStream_t stream);
// out[a, j] = h[a] . w2[e, j].
cudaError_t LaunchMoeDown(const MoeExpertGemmParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
