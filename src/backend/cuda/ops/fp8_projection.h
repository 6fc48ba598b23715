// A dense FP8 projection (e4m3 weights, one f32 scale per 128x128 block) at any batch size:
//   N <= kFp8W8A16MaxRows   Fp8W8A16Linear: bf16 activations as they are, weights widened
//                           in registers; weight-bandwidth bound (decode).
//   N >  kFp8W8A16MaxRows   Fp8Linear (cuBLASLt): activations quantised to e4m3 per token and
//                           128-group first (plain f32 scales), then the block-scaled FP8
//                           GEMM; compute bound (prefill). Rows are taken kFp8ProjectionChunkRows
//                           at a time (a fixed workspace), and the last N % 4 rows (cuBLASLt
//                           has no algorithm for N % 4 != 0) go through W8A16.
// The two paths differ numerically: W8A16 multiplies the bf16 x exactly, the cuBLASLt path
// rounds x to e4m3 (3 mantissa bits, ~2-3% relative error per element; see bench/fp8/NOTES.md),
// so a prefill's rows are less exact than a decode's. The threshold is where W8A16 (weights
// re-read once per 16 tokens) is expected to stop beating cuBLASLt; the benchmark
// (peregrine_fp8_bench) measures both. Shapes cuBLASLt cannot take (M or K not a multiple of
// 128) and devices without its block-scaled FP8 kernels (Unimplemented) use W8A16 for every
// row. Never allocates; capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/blas.h"
#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

inline constexpr int64_t kFp8W8A16MaxRows = 64;
inline constexpr int64_t kFp8ProjectionChunkRows = 2048;

struct Fp8ProjectionArgs {
  Tensor x;          // [N, K] bf16; K a positive multiple of 64
  Tensor w;          // [M, K] f8e4m3
  Tensor w_scale;    // [ceil(M / 128), ceil(K / 128)] f32
  Tensor y;          // [N, M] bf16 or f32
  Tensor workspace;  // [>= Fp8ProjectionWorkspaceBytes(K, M)] u8, 256-byte aligned; may be
                     // empty when N <= kFp8W8A16MaxRows
};

// Workspace bytes that cover every N for this weight shape (the cuBLASLt path's quantised
// activations for one chunk of rows); 0 when the shape never takes that path.
size_t Fp8ProjectionWorkspaceBytes(int64_t k, int64_t m);

// InvalidArgument naming the tensor for bad arguments or a short workspace; cuBLAS failures
// other than Unimplemented through CublasStatus. Asynchronous on `stream`; writes y and the
// workspace only.
Status Fp8Projection(Blas& blas, const Fp8ProjectionArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
