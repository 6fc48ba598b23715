// Our own exponentials for non-positive arguments: Cody-Waite range reduction, a Taylor
// polynomial and an exponent built from bits. Only basic IEEE operations (the library is built
// with -ffp-contract=off, so nothing is fused): results are bit-identical on every platform, and
// the branch-free form lets loops over them vectorize, which std::exp calls do not.
#pragma once

#include <bit>
#include <cstdint>

// The loops over these exponentials are also compiled for AVX2 on x86-64 and the variant is chosen
// at load time; every lane does the same IEEE operations, so the choice never changes a result.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PG_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PG_VECTOR_CLONES
#endif

namespace peregrine {

// exp(y) for -87 <= y <= 0 within 2 ulp; 0 below -87 (such weights are under 2^-125 of the
// maximum's, far below the 2^-53 resolution of a draw) and for NaN; 1 for y > 0.
inline float ExpNonPositive(float y) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundToInt = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds
  constexpr float kLn2Hi = 0.693359375f;      // few mantissa bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;   // ln 2 - kLn2Hi
  constexpr float kMinExponent = -87.0f;
  // Clamped first so that NaN never reaches the float -> int conversion below (undefined).
  const float y_clamped = y >= kMinExponent ? (y <= 0.0f ? y : 0.0f) : kMinExponent;
  const float n = (y_clamped * kLog2e + kRoundToInt) - kRoundToInt;  // round(y / ln 2)
  const float r = (y_clamped - n * kLn2Hi) - n * kLn2Lo;             // |r| <= ln(2) / 2
  float p = 1.0f / 5040.0f;  // Taylor series of exp(r) up to r^7 (truncation < 1e-8 relative)
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_to_n = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float value = p * two_to_n;
  return y >= kMinExponent ? value : 0.0f;
}

// exp(y) in double for -708 <= y <= 0 within 2 ulp; 0 below -708 and for NaN; 1 for y > 0.
// The exponent comes from the low bits of the rounding constant's sum, so no conversion to an
// integer type is needed (none exists for 64-bit lanes before AVX-512).
inline double ExpNonPositiveDouble(double y) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kRoundToInt = 0x1.8p52;             // 1.5 * 2^52: the sum's low bits hold n
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1;       // trailing zeros: n * kLn2Hi is exact
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;      // ln 2 - kLn2Hi
  constexpr double kMinExponent = -708.0;
  const double y_clamped = y >= kMinExponent ? (y <= 0.0 ? y : 0.0) : kMinExponent;
  const double shifted = y_clamped * kLog2e + kRoundToInt;
  const double n = shifted - kRoundToInt;                // round(y / ln 2)
  const double r = (y_clamped - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln(2) / 2
  double p = 1.0 / 6227020800.0;  // Taylor series of exp(r) up to r^13 (truncation < 1e-17)
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const uint64_t biased = std::bit_cast<uint64_t>(shifted) + 1023;  // low 12 bits: n + 1023
  const double two_to_n = std::bit_cast<double>(biased << 52);
  const double value = p * two_to_n;
  return y >= kMinExponent ? value : 0.0;
}

}  // namespace peregrine
