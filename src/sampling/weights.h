// Temperature weights: exp((logit - max_logit) / temperature), the unnormalised probabilities of
// the non-greedy path. The exponential is our own (exp.h), so weights are identical on every
// platform and the loops over them vectorize.
#pragma once

#include <span>

#include "sampling/exp.h"

namespace peregrine {

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
