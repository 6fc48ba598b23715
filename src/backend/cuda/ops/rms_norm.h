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
  // Optional RoPE on y's trailing rope_dim values, fused (the same bits as Rope on y after the
  // norm, rows per position R / T). Absent rope_positions: none. N and rope_dim multiples of 8.
  Tensor rope_positions;  // [T] i32
  Tensor rope_cos;        // [num_positions, rope_dim / 2] f32
  Tensor rope_sin;        // [num_positions, rope_dim / 2] f32
  int64_t rope_dim = 0;
  // Optional: y's first fp8_nope values per row round-trip through V4's FP8 KV format (e4m3
  // blocks of 64, kernels/common/kv_fp8_row.h), as a KV row an FP8 cache gives back. A
  // multiple of 8 within N (N a multiple of 8); 0: none.
  int64_t fp8_nope = 0;
};

// y = x * rsqrt(mean(x^2) + eps) * weight per row. InvalidArgument (naming the tensor) for
// bad shapes, dtypes, devices, alignment or an aliasing y of another dtype; Internal when the
// launch fails. Asynchronous on `stream`.
Status RmsNorm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
