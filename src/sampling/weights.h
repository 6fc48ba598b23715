// Temperature weights: exp((logit - max_logit) / temperature), the unnormalised probabilities of
// the non-greedy path. The exponential is our own (range reduction + degree-7 polynomial, basic
// IEEE operations only), so weights are identical on every platform and the loops vectorize;
// the library is built with -ffp-contract=off so no compiler fuses those operations.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

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

// Weight of `logit` relative to the row maximum `max_logit`, at 1 / inv_temperature:
// exactly 1 for the maximum, 0 for -inf and NaN, never NaN, in [0, 1].
// Branch-free (both sides computed) so that loops over it vectorize.
inline float TemperatureWeight(float logit, float max_logit, float inv_temperature) {
  const float e = ExpNonPositive((logit - max_logit) * inv_temperature);
  return logit >= max_logit ? 1.0f : e;
}

// 1 / temperature, capped at FLT_MAX so that a subnormal temperature cannot produce inf * 0.
float InverseTemperature(float temperature);

// out[i] = TemperatureWeight(logits[i], max_logit, inv_temperature); out.size() >= logits.size().
void ComputeWeights(std::span<const float> logits, float max_logit, float inv_temperature, std::span<float> out);

}  // namespace peregrine
