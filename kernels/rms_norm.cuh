// RMSNorm over rows: y = x * rsqrt(mean(x^2) + eps) * weight, fp32 math, bf16 or fp32 in
// and out. Per-head norms are the same op over rows of head_dim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/element_type.h"

namespace peregrine::kernels {

struct RmsNormParams {
  const void* x;         // [rows, n] in_type
  const float* weight;   // [n], or null for the unweighted norm
  void* y;               // [rows, n] out_type (may alias x when the types match)
  int64_t rows = 0;
  int n = 0;
  float eps = 1e-6f;
  ElementType in_type = ElementType::kF32;
  ElementType out_type = ElementType::kF32;
  // Optional RoPE on y's trailing rope_dim values, fused: each pair is rotated from its
  // rounded y values as LaunchRope would rotate y afterwards (the same bits). Needs n and
  // rope_dim multiples of 8. rope_positions null: no rotation.
  const int32_t* rope_positions = nullptr;  // [rows / rope_rows_per_position]
  const float* rope_cos = nullptr;          // [rope_num_positions, rope_dim / 2]
  const float* rope_sin = nullptr;
  int rope_dim = 0;
  int rope_rows_per_position = 1;
  int rope_num_positions = 0;  // rows whose position is outside [0, this) are not rotated
  // Optional: the first fp8_nope values of each row (a multiple of 8) round-trip through V4's
  // FP8 KV format (kernels/common/kv_fp8_row.h: e4m3 in blocks of 64 under a power-of-two
  // scale) before they are stored, so a KV row holds what an FP8 cache gives back (the rest,
  // the rope dims, stay as they are). Needs n a multiple of 8. 0: none.
  int fp8_nope = 0;
};

// Rows of `n` go to one warp up to this width, to a whole 256-thread block above it.
inline constexpr int kRmsNormWarpRowMax = 1024;

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
