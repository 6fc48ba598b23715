// y = x . w^T (the dense projections of the model): bf16 weights, bf16 or f32 activations and
// outputs, fp32 accumulation, through cuBLAS, or with `Blas::batch_invariant()` through the
// batch-invariant kernel (kernels/bf16_linear.cuh; bf16 x and w only). At decode sizes (bf16, N
// <= kernels::kBf16GemvMaxTokens, K a multiple of 8, 16-byte aligned x and w) the default path
// is the weight-streaming kernel kernels/bf16_gemv.cuh instead of cuBLAS. Never allocates (the
// Blas handle owns its workspace), so it can be captured.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/blas.h"
#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct LinearArgs {
  Tensor x;  // [N, in] bf16 or f32 (f32 only with f32 weights)
  Tensor w;  // [out, in] bf16 or f32
  Tensor y;  // [N, out] bf16 or f32
};

// InvalidArgument for mismatched shapes or an unsupported dtype mix (x and w must share a
// dtype); cuBLAS failures map through CublasStatus. Asynchronous on `stream`.
Status Linear(Blas& blas, const LinearArgs& args, cudaStream_t stream);

// y[g] = x . w[g]^T for each of the G matrices of `w`: projections of one input and one shape
// (a compressor's wkv and wgate). At decode sizes and in batch-invariant mode one launch runs
// them all (batch-invariant: each group's bits are Linear's; decode-sized: the warps a row is
// split over are chosen for all groups at once, so the sums' order may differ from Linear's);
// past decode sizes, Linear per group. Same failures as Linear, bf16 x and w only.
struct GroupedLinearArgs {
  Tensor x;  // [N, K] bf16
  Tensor w;  // [G, M, K] bf16
  Tensor y;  // [G, N, M] bf16 or f32
};
Status GroupedLinear(Blas& blas, const GroupedLinearArgs& args, cudaStream_t stream);

// The cuBLAS GEMM alone, whatever the mode and the size (Linear's path past decode sizes; the
// peer in benchmarks). Same arguments and failures as Linear.
Status CublasLinear(Blas& blas, const LinearArgs& args, cudaStream_t stream);

// The batch-invariant kernel on rows that need not be contiguous (the grouped output
// projection reads one head group of every row): y[t, :m] = x[t, :k] . w^T, the rows of x
// `x_stride` and those of y `y_stride` elements apart; with `groups` > 1, that many such
// projections in one launch, group i at x + i * x_group, w + i * w_group, y + i * y_group.
struct StridedLinearArgs {
  const void* x = nullptr;  // bf16, 16-byte aligned rows
  int64_t x_stride = 0;     // >= k, a multiple of 8
  const void* w = nullptr;  // [m, k] bf16
  void* y = nullptr;        // bf16 or f32
  bool y_f32 = false;
  int64_t y_stride = 0;     // >= m
  int64_t n = 0, m = 0, k = 0;  // k a positive multiple of 16
  int64_t groups = 1;
  int64_t x_group = 0, w_group = 0, y_group = 0;  // elements; x's and w's multiples of 8
};
Status BatchInvariantLinear(const Blas& blas, const StridedLinearArgs& args, cudaStream_t stream);

// Whether DecodeLinear takes `args`: N in 1 .. kernels::kBf16GemvMaxTokens, K a positive multiple
// of 8, x's row and group strides and w's group stride multiples of 8, x and w 16-byte aligned.
bool FitsDecodeLinear(const StridedLinearArgs& args);
// The decode-sized projection (kernels/bf16_gemv.cuh) on the same arguments; InvalidArgument
// where FitsDecodeLinear is false or M is not positive.
Status DecodeLinear(const Blas& blas, const StridedLinearArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
