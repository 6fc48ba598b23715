// y = x . w^T through cuBLAS (the dense projections of the model): bf16 weights, bf16 or f32
// activations and outputs, fp32 accumulation. Never allocates (the Blas handle owns its
// workspace), so it can be captured.
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

}  // namespace peregrine::cuda
