// InverseTemperature and the vectorized weight loop.
#include "sampling/weights.h"

#include <algorithm>
#include <limits>

namespace peregrine {

float InverseTemperature(float temperature) {
  const double inverse = 1.0 / static_cast<double>(temperature);
  return static_cast<float>(std::min(inverse, static_cast<double>(std::numeric_limits<float>::max())));
}

PG_VECTOR_CLONES void ComputeWeights(std::span<const float> logits, float max_logit, float inv_temperature,
                                     std::span<float> out) {
  const float* in = logits.data();
  float* dst = out.data();
  const size_t n = logits.size();
  for (size_t i = 0; i < n; ++i) dst[i] = TemperatureWeight(in[i], max_logit, inv_temperature);
}

}  // namespace peregrine
