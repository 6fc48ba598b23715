#include "base/dtype.h"

#include <bit>
#include <cmath>

namespace peregrine {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kUE8M0: return "ue8m0";
    case DType::kE2M1: return "e2m1";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI16: return "i16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kBool: return "bool";
  }
  return "?";
}

int DTypeBits(DType t) {
  switch (t) {
    case DType::kF32: return 32;
    case DType::kBF16: return 16;
    case DType::kF16: return 16;
    case DType::kF8E4M3: return 8;
    case DType::kUE8M0: return 8;
    case DType::kE2M1: return 4;
    case DType::kI8: return 8;
    case DType::kU8: return 8;
    case DType::kI16: return 16;
    case DType::kI32: return 32;
    case DType::kI64: return 64;
    case DType::kBool: return 8;
  }
  return 0;
}

size_t DTypeBytes(DType t, size_t num_elements) {
  return (num_elements * static_cast<size_t>(DTypeBits(t)) + 7) / 8;
}

namespace {
struct SafetensorsName {
  std::string_view name;
  DType dtype;
};
constexpr SafetensorsName kSafetensorsNames[] = {
    {"F32", DType::kF32},         {"BF16", DType::kBF16}, {"F16", DType::kF16},
    {"F8_E4M3", DType::kF8E4M3},  {"F8_E8M0", DType::kUE8M0}, {"F4", DType::kE2M1},
    {"I8", DType::kI8},           {"U8", DType::kU8},     {"I16", DType::kI16},
    {"I32", DType::kI32},         {"I64", DType::kI64},   {"BOOL", DType::kBool},
};
}  // namespace

std::optional<DType> DTypeFromSafetensors(std::string_view name) {
  for (const auto& n : kSafetensorsNames)
    if (n.name == name) return n.dtype;
  return std::nullopt;
}

std::string_view DTypeSafetensorsName(DType t) {
  for (const auto& n : kSafetensorsNames)
    if (n.dtype == t) return n.name;
  return "?";
}

float BF16ToF32(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

uint16_t F32ToBF16(float v) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fff + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {
    float f = std::ldexp(static_cast<float>(man), -24);
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000 | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t F32ToF16(float v) {
  const uint32_t b = std::bit_cast<uint32_t>(v);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const float a = std::fabs(v);
  if (std::isnan(v)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, nearest even.
    const float q = std::nearbyint(a * 16777216.0f);
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t ab = b & 0x7fffffff;
  ab += 0xfff + ((ab >> 13) & 1);
  return sign | static_cast<uint16_t>((ab >> 13) - (112u << 10));
}

float E4M3ToF32(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  float f = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                     : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return neg ? -f : f;
}

uint8_t F32ToE4M3(float v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  float a = std::fmin(std::fabs(v), 448.0f);
  if (a < std::ldexp(1.0f, -6)) {
    // Subnormals are multiples of 2^-9.
    const int q = static_cast<int>(std::nearbyint(a * 512.0f));
    return sign | static_cast<uint8_t>(q);  // q == 8 encodes 2^-6 exactly
  }
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exp = e - 1;  // a = 1.x * 2^exp
  float q = std::nearbyint(std::ldexp(a, -exp) * 8.0f);  // 8..16
  int ex = exp;
  if (q >= 16.0f) {
    q = 8.0f;
    ++ex;
  }
  const int man = static_cast<int>(q) - 8;
  return sign | static_cast<uint8_t>(((ex + 7) << 3) | man);
}

float UE8M0ToF32(uint8_t v) {
  if (v == 0xff) return std::nanf("");
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

uint8_t F32ToUE8M0(float v) {
  int e = 0;
  std::frexp(v, &e);
  return static_cast<uint8_t>(e - 1 + 127);
}

namespace {
constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
}

float E2M1ToF32(uint8_t nibble) {
  const float f = kE2M1Values[nibble & 7];
  return (nibble & 8) ? -f : f;
}

uint8_t F32ToE2M1(float v) {
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const float a = std::fabs(v);
  int best = 0;
  for (int i = 1; i < 8; ++i) {
    const float d = std::fabs(kE2M1Values[i] - a);
    const float db = std::fabs(kE2M1Values[best] - a);
    // Ties go to the even code (mantissa bit clear).
    if (d < db || (d == db && (i & 1) == 0)) best = i;
  }
  return sign | static_cast<uint8_t>(best);
}

}  // namespace peregrine
