// Element types and scalar conversions. Storage types are plain integers so host code
// needs no CUDA headers; every conversion rounds to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace peregrine {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF8E4M3,   // e4m3 "fn": no infinities, 0x7f/0xff are NaN, max 448
  kUE8M0,    // unsigned power-of-two scale: 2^(bits - 127), 0xff is NaN
  kE2M1,     // fp4: sign, 2 exponent bits, 1 mantissa bit; two per byte, low nibble first
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

std::string_view DTypeName(DType t);
// Bits per element (4 for e2m1, which packs two per byte).
int DTypeBits(DType t);
// Bytes for `num_elements` elements (rounds e2m1 up to whole bytes).
size_t DTypeBytes(DType t, size_t num_elements);
// Safetensors dtype string ("BF16", "F8_E4M3", "F8_E8M0", ...) to DType.
std::optional<DType> DTypeFromSafetensors(std::string_view name);
std::string_view DTypeSafetensorsName(DType t);

// Scalar conversions.
float BF16ToF32(uint16_t v);
uint16_t F32ToBF16(float v);
float F16ToF32(uint16_t v);
uint16_t F32ToF16(float v);
float E4M3ToF32(uint8_t v);
// Saturates finite values to ±448 (callers scale first); NaN maps to 0x7f.
uint8_t F32ToE4M3(float v);
float UE8M0ToF32(uint8_t v);
// The exponent byte of a power of two; `v` must be a positive power of two.
uint8_t F32ToUE8M0(float v);
// `nibble` is the low 4 bits.
float E2M1ToF32(uint8_t nibble);
// Nearest e2m1 value, ties to even, saturating to ±6.
uint8_t F32ToE2M1(float v);

// Rounds through the format and back (used to simulate storage precision).
inline float RoundBF16(float v) { return BF16ToF32(F32ToBF16(v)); }

}  // namespace peregrine
