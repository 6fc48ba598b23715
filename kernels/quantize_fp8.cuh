// Dynamic per-token activation quantisation to FP8 e4m3, DeepSeek's act_quant: every run of
// 128 consecutive inputs of a row (a "group") gets its own fp32 scale
//   s = max(amax(group), kFp8ActAmaxFloor) / 448,   q = e4m3(x / s)   (x ~= q * s)
// Rounding: x / s is an IEEE division, the e4m3 conversion rounds to nearest even and
// saturates to +-448 (NaN stays NaN, 0x7f) -- the same as base/dtype.h's F32ToE4M3, so a CPU
// reference reproduces the codes bit for bit. With `pow2_scales` the scale is rounded up to a
// power of two first (DeepSeek's "ue8m0" scale format), which keeps every |x / s| <= 448 too.
// One pass over x, no atomics, no allocation: capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kFp8GroupSize = 128;
inline constexpr float kFp8E4M3Max = 448.0f;
// All-zero groups would give s = 0 and 0 / 0; DeepSeek clamps amax the same way.
inline constexpr float kFp8ActAmaxFloor = 1e-4f;

struct QuantizeFp8Params {
  const void* x = nullptr;   // [rows, k] bf16, rows 16-byte aligned
  uint8_t* x_q = nullptr;    // [rows, k] e4m3
  float* scale = nullptr;    // group (r, g) at scale[r * scale_row_stride + g * scale_group_stride]
  int64_t rows = 0;
  int k = 0;                 // a multiple of kFp8GroupSize
  int64_t scale_row_stride = 0;    // k / 128 for a row-major [rows, k / 128] table
  int64_t scale_group_stride = 0;  // 1 for row-major; `rows` for the group-major table cuBLASLt reads
  bool pow2_scales = false;
};

cudaError_t LaunchQuantizeFp8(const QuantizeFp8Params& p, cudaStream_t stream);

}  // namespace peregrine::kernels
