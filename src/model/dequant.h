// Conversions from stored checkpoint encodings to f32 / i64 for the CPU backend. Sources are
// raw little-endian bytes straight from the mapping (possibly unaligned); destinations are
// plain arrays. Block scales are powers of two, so fp8 and fp4 dequantisation is exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace peregrine {

inline constexpr int64_t kFp8BlockSize = 128;   // weight blocks of 128 x 128 share one scale
inline constexpr int64_t kMxfp4BlockSize = 32;  // 32 consecutive inputs share one scale

// True for the dtypes ConvertToF32 handles elementwise: f32, bf16, f16, f8e4m3, ue8m0.
bool IsElementwiseFloat(DType dtype);
void ConvertToF32(DType dtype, const uint8_t* src, size_t count, float* dst);

// weight: e4m3 [rows, cols]; scale: [ceil(rows/128), ceil(cols/128)] of ue8m0 or f32.
// dst[r, c] = weight[r, c] * scale[r / 128, c / 128].
void DequantFp8Blocks(const uint8_t* weight, int64_t rows, int64_t cols, const uint8_t* scale,
                      DType scale_dtype, float* dst);

// packed: e2m1 [rows, cols] two per byte, the low nibble the even column; scale: ue8m0
// [rows, cols/32]. `cols` is the logical column count (a multiple of 32).
void DequantMxfp4(const uint8_t* packed, int64_t rows, int64_t cols, const uint8_t* scale,
                  float* dst);

// The inverse for backends that keep routed experts in MXFP4, with the release's rule (and
// tools/convert_to_official.py's): per 32 consecutive inputs s = 2^ceil(log2(max(amax, 1e-4)
// / 6)), stored as the UE8M0 byte; each code is the e2m1 value nearest to x / s, ties to the
// even code. src: f32 [rows, cols]; packed [rows, cols/2]; scale [rows, cols/32]. `cols` a
// multiple of 32. DequantMxfp4 of the result is exact for values already in that grid.
void QuantizeMxfp4(const float* src, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale);

// i64 or i32 elements to i64.
void ConvertToI64(DType dtype, const uint8_t* src, size_t count, int64_t* dst);

}  // namespace peregrine
