#include "model/dequant.h"

#include <array>
#include <cstring>

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

}  // namespace peregrine
