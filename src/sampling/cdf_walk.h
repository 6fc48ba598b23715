// Turning one uniform draw into a token: the platform-independent part of sampling.
// std::uniform_real_distribution and std::discrete_distribution are implementation-defined,
// so the mapping is spelled out here: 53 random bits -> u in [0, 1) -> first token whose
// cumulative weight exceeds u * total, tokens visited in ascending id order.
#pragma once

#include <cstdint>
#include <span>

#include "sampling/truncation.h"

namespace peregrine {

// The top 53 bits of `bits` as a double in [0, 1), every value a multiple of 2^-53.
inline double UnitIntervalFromBits(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Samples from `kept` (ascending id order) with probability proportional to weight.
// A zero-weight token is never chosen. 0 if `kept` is empty or all weights are 0.
int32_t WalkKept(std::span<const KeptToken> kept, double u);

// Samples from the whole vocabulary with probability proportional to
// TemperatureWeight(logit, max_logit, inv_temperature); max_logit == MaxLogit(logits).
// Two passes: block sums, then one block walked token by token.
int32_t WalkFullVocab(std::span<const float> logits, float max_logit, float inv_temperature, double u);

}  // namespace peregrine
