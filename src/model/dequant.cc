#include "model/dequant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"

namespace peregrine {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::array<float, 256> E4M3Table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = E4M3ToF32(static_cast<uint8_t>(i));
  return t;
}

float ScaleAt(const uint8_t* scale, DType dtype, int64_t index) {
  const auto i = static_cast<size_t>(index);
  if (dtype == DType::kUE8M0) return UE8M0ToF32(scale[i]);
  PG_CHECK(dtype == DType::kF32, "block scales are ue8m0 or f32");
  return Load<float>(scale + 4 * i);
}

}  // namespace

bool IsElementwiseFloat(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kUE8M0: return true;
    case DType::kE2M1:
    case DType::kI8:
    case DType::kU8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kBool: return false;
  }
  return false;
}

void ConvertToF32(DType dtype, const uint8_t* src, size_t count, float* dst) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, count * sizeof(float)); return;
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) dst[i] = BF16ToF32(Load<uint16_t>(src + 2 * i));
      return;
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) dst[i] = F16ToF32(Load<uint16_t>(src + 2 * i));
      return;
    case DType::kF8E4M3: {
      const auto table = E4M3Table();
      for (size_t i = 0; i < count; ++i) dst[i] = table[src[i]];
      return;
    }
    case DType::kUE8M0:
      for (size_t i = 0; i < count; ++i) dst[i] = UE8M0ToF32(src[i]);
      return;
    case DType::kE2M1:
    case DType::kI8:
    case DType::kU8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kBool: break;
  }
  PG_CHECK(false, "ConvertToF32 called with a non-float dtype");
}

void DequantFp8Blocks(const uint8_t* weight, int64_t rows, int64_t cols, const uint8_t* scale,
                      DType scale_dtype, float* dst) {
  const auto table = E4M3Table();
  const int64_t scale_cols = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t scale_row = (r / kFp8BlockSize) * scale_cols;
    for (int64_t c0 = 0; c0 < cols; c0 += kFp8BlockSize) {
      const float s = ScaleAt(scale, scale_dtype, scale_row + c0 / kFp8BlockSize);
      const int64_t c1 = c0 + kFp8BlockSize < cols ? c0 + kFp8BlockSize : cols;
      for (int64_t c = c0; c < c1; ++c) {
        const auto i = static_cast<size_t>(r * cols + c);
        dst[i] = table[weight[i]] * s;
      }
    }
  }
}

void DequantMxfp4(const uint8_t* packed, int64_t rows, int64_t cols, const uint8_t* scale,
                  float* dst) {
  PG_CHECK(cols % kMxfp4BlockSize == 0, "mxfp4 rows are whole 32-element blocks");
  const int64_t scale_cols = cols / kMxfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < scale_cols; ++b) {
      const float s = UE8M0ToF32(scale[static_cast<size_t>(r * scale_cols + b)]);
      for (int64_t c = b * kMxfp4BlockSize; c < (b + 1) * kMxfp4BlockSize; c += 2) {
        const auto i = static_cast<size_t>(r * cols + c);
        const uint8_t byte = packed[i / 2];
        dst[i] = E2M1ToF32(byte & 0xf) * s;
        dst[i + 1] = E2M1ToF32(static_cast<uint8_t>(byte >> 4)) * s;
      }
    }
  }
}

void ConvertToI64(DType dtype, const uint8_t* src, size_t count, int64_t* dst) {
  if (dtype == DType::kI64) {
    std::memcpy(dst, src, count * sizeof(int64_t));
    return;
  }
  PG_CHECK(dtype == DType::kI32, "ConvertToI64 reads i64 or i32");
  for (size_t i = 0; i < count; ++i) dst[i] = Load<int32_t>(src + 4 * i);
}

void QuantizeMxfp4(const float* src, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale) {
  PG_CHECK(cols % kMxfp4BlockSize == 0, "MXFP4 needs a multiple of 32 columns");
  // The non-negative e2m1 values by code 0..7; bit 3 is the sign.
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    uint8_t* out = packed + r * cols / 2;
    for (int64_t b = 0; b < cols / kMxfp4BlockSize; ++b) {
      const float* x = row + b * kMxfp4BlockSize;
      float amax = 0.0f;
      for (int64_t i = 0; i < kMxfp4BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
      amax = std::min(amax, std::numeric_limits<float>::max());  // an infinite input scales as the largest finite
      const int exponent = static_cast<int>(std::ceil(std::log2(std::max<double>(amax, 1e-4) / 6.0)));
      const int biased = std::clamp(exponent + 127, 0, 254);
      scale[r * (cols / kMxfp4BlockSize) + b] = static_cast<uint8_t>(biased);
      const float inv = std::ldexp(1.0f, -(biased - 127));
      for (int64_t i = 0; i < kMxfp4BlockSize; ++i) {
        const float v = x[i] * inv;
        const float a = std::fabs(v);
        int best = 0;
        for (int c = 1; c < 8; ++c) {
          const float d = std::fabs(a - kValues[c]), db = std::fabs(a - kValues[best]);
          if (d < db || (d == db && c % 2 == 0)) best = c;
        }
        const uint8_t code = static_cast<uint8_t>(best | (std::signbit(v) ? 8 : 0));
        const int64_t col = b * kMxfp4BlockSize + i;
        uint8_t& byte = out[col / 2];
        byte = col % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | code) : static_cast<uint8_t>((byte & 0x0f) | (code << 4));
      }
    }
  }
}

}  // namespace peregrine
