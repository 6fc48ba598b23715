// DeepSeek-V4's grouped low-rank output projection on the device:
//   mid[b, g, :] = wo_a[g] . o[b, heads of group g]      (one strided-batched GEMM over g)
//   out[b, :]    = wo_b . mid[b, :]                      (one GEMM)
// bf16 in and out, fp32 accumulation; mid is rounded to bf16 between the two. Through cuBLAS;
// at decode sizes (B <= kernels::kBf16GemvMaxTokens) both through the decode-sized projection
// (kernels/bf16_gemv.cuh, the head groups in one launch); in batch-invariant mode through
// kernels/bf16_linear.cuh. wo_b may be FP8 e4m3 with 128x128 block scales: the second GEMM then
// goes through Fp8Projection (W8A16 for B <= 64 rows, cuBLASLt with e4m3 activations above).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/blas.h"
#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct OutputProjectionArgs {
  Tensor o;     // [B, H, D] bf16 attention output (after the inverse RoPE)
  Tensor wo_a;  // [G, R, H*D/G] bf16
  Tensor wo_b;  // [hidden, G*R] bf16 or f8e4m3
  Tensor mid;   // [B, G, R] bf16 workspace
  Tensor out;   // [B, hidden] bf16
  Tensor wo_b_scale;      // [hidden/128, G*R/128] f32 (f8e4m3 wo_b only)
  Tensor fp8_workspace;   // Fp8ProjectionArgs::workspace (f8e4m3 wo_b only)
};

// InvalidArgument for bad tensors (H*D not divisible by G, mismatched R); cuBLAS failures
// map through CublasStatus. Asynchronous on `stream`; never allocates (Blas owns its
// workspace), so it can be captured.
Status GroupedOutputProjection(Blas& blas, const OutputProjectionArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
