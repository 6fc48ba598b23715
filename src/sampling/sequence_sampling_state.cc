// SequenceSamplingState: token counts for the penalties and the request's RNG.
#include <chrono>

#include "sampling/sampler.h"

namespace peregrine {
namespace {

// A request without a seed still gets a 64-bit one. std::random_device may throw where no
// entropy source exists; the clock is then the (weaker) fallback, since sampling must not fail.
uint64_t RandomSeed() {
  try {
    std::random_device device;
    const uint64_t high = device();
    return (high << 32) ^ device();
  } catch (...) {
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
           0x9E3779B97F4A7C15ull;
  }
}

}  // namespace

SequenceSamplingState::SequenceSamplingState(const SamplingParams& params,
                                             std::span<const int32_t> prompt_ids)
    : seed_(params.seed.has_value() ? *params.seed : RandomSeed()), rng_(seed_) {
  if (params.repetition_penalty != 1.0f) {
    for (const int32_t token : prompt_ids) ++prompt_counts_[token];
  }
}

void SequenceSamplingState::Append(int32_t token) {
  ++generated_counts_[token];
  ++num_generated_;
}

}  // namespace peregrine
