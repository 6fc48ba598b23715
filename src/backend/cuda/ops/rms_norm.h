// RMSNorm on the device: weighted (attn_norm, q_norm, kv_norm, compressor norms) or
// unweighted (the per-head q norm: rows of head_dim), fp32 math.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct RmsNormArgs {
  Tensor x;       // [R, N] bf16 or f32
  Tensor weight;  // [N] f32, or absent (null data) for the unweighted norm
  Tensor y;       // [R, N] bf16 or f32; may be x itself when the dtypes match
  float eps = 1e-6f;
};

// y = x * rsqrt(mean(x^2) + eps) * weight per row. InvalidArgument (naming the tensor) for
// bad shapes, dtypes, devices, alignment or an aliasing y of another dtype; Internal when the
// launch fails. Asynchronous on `stream`.
Status RmsNorm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
