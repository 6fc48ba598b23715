#include "model/deepseek_v4/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace peregrine::deepseek_v4 {

namespace {

// HF `find_correction_dim`: the pair index whose wavelength spans `num_rotations` turns over
// the original context.
double CorrectionDim(double num_rotations, int64_t dim, double base, double max_positions) {
  return static_cast<double>(dim) * std::log(max_positions / (num_rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

}  // namespace

RopeTable::RopeTable(const RopeConfig& config, int64_t rope_dim)
    : rope_dim_(rope_dim), attention_factor_(static_cast<float>(config.attention_factor)) {
  const int64_t half = rope_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  const float base = static_cast<float>(config.theta);
  for (int64_t i = 0; i < half; ++i) {
    // fp32 throughout, as torch computes `base ** (arange(0, dim, 2).float() / dim)`.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    const float pos_freq = std::pow(base, exponent);
    const float extrapolation = 1.0f / pos_freq;
    if (!config.yarn) {
      inv_freq_[static_cast<size_t>(i)] = extrapolation;
      continue;
    }
    const float interpolation = 1.0f / (static_cast<float>(config.factor) * pos_freq);
    const double orig = static_cast<double>(config.original_max_position_embeddings);
    double low = std::floor(CorrectionDim(config.beta_fast, rope_dim, config.theta, orig));
    double high = std::ceil(CorrectionDim(config.beta_slow, rope_dim, config.theta, orig));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(rope_dim - 1));
    if (low == high) high += 0.001;
    const float lowf = static_cast<float>(low);
    const float highf = static_cast<float>(high);
    const float ramp = std::clamp((static_cast<float>(i) - lowf) / (highf - lowf), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq_[static_cast<size_t>(i)] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

void RopeTable::Angles(int64_t position, float* cos, float* sin) const {
  const float p = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = inv_freq_[i] * p;
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor_;
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor_;
  }
}

}  // namespace peregrine::deepseek_v4
