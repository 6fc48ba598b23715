// WalkKept and WalkFullVocab. Sums are in double and in a fixed order, so the same weights and
// the same u always give the same token.
#include "sampling/cdf_walk.h"

#include <algorithm>
#include <vector>

#include "sampling/fixed_order_sum.h"

namespace peregrine {
namespace {

constexpr size_t kWalkBlock = 1024;

}  // namespace

int32_t WalkKept(std::span<const KeptToken> kept, double u) {
  double total = 0.0;
  for (const KeptToken& c : kept) total += c.weight;
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_positive = 0;
  for (const KeptToken& c : kept) {
    if (c.weight <= 0.0f) continue;
    cumulative += c.weight;
    last_positive = c.token;
    if (cumulative > target) return c.token;
  }
  return last_positive;
}

int32_t WalkFullVocab(std::span<const float> logits, float max_logit, float inv_temperature, double u) {
  const size_t n = logits.size();
  const size_t num_blocks = (n + kWalkBlock - 1) / kWalkBlock;
  std::vector<double> block_mass(num_blocks, 0.0);
  float weights[kWalkBlock];
  double total = 0.0;
  for (size_t b = 0; b < num_blocks; ++b) {
    const size_t begin = b * kWalkBlock;
    const size_t size = std::min(kWalkBlock, n - begin);
    ComputeWeights(logits.subspan(begin, size), max_logit, inv_temperature, weights);
    block_mass[b] = FixedOrderSum(weights, size);
    total += block_mass[b];
  }
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t b = 0; b < num_blocks; ++b) {
    if (block_mass[b] <= 0.0 || cumulative + block_mass[b] <= target) {
      cumulative += block_mass[b];
      continue;
    }
    const size_t begin = b * kWalkBlock;
    const size_t size = std::min(kWalkBlock, n - begin);
    ComputeWeights(logits.subspan(begin, size), max_logit, inv_temperature, weights);
    int64_t last_positive = -1;
    for (size_t j = 0; j < size; ++j) {
      if (weights[j] <= 0.0f) continue;
      last_positive = static_cast<int64_t>(begin + j);
      cumulative += weights[j];
      if (cumulative > target) return static_cast<int32_t>(begin + j);
    }
    // The in-block running sum fell a hair short of the block sum (other addition order).
    return static_cast<int32_t>(last_positive);
  }
  // u * total rounded up to total: the last token that can be drawn at all.
  for (size_t i = n; i > 0; --i) {
    if (TemperatureWeight(logits[i - 1], max_logit, inv_temperature) > 0.0f) return static_cast<int32_t>(i - 1);
  }
  return 0;
}

}  // namespace peregrine
