// The truncations (top-k, top-p, min-p) of the non-greedy path.
// Nothing here writes to the logits; the kept set is a small list of candidates.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"
#include "sampling/weights.h"

namespace peregrine {

struct KeptToken {
  int32_t token = 0;
  float logit = 0.0f;   // processed logit (after bias and penalties)
  float weight = 0.0f;  // TemperatureWeight of logit
};

// True when top-k, top-p or min-p removes anything for a vocabulary of `vocab_size`.
bool HasTruncation(const SamplingParams& params, size_t vocab_size);

// The tokens that survive top-k, then top-p, then min-p, in ascending id order with their
// weights (relative to the row maximum). Requires HasTruncation(params, logits.size()).
// Never empty unless every logit is NaN or -inf: the argmax always survives.
std::vector<KeptToken> TruncateDistribution(std::span<const float> logits, float inv_temperature,
                                            const SamplingParams& params);

// All tokens whose logit is >= the k-th largest logit (ties at the boundary kept), unordered,
// weights unset. NaN and -inf logits are never kept (fewer than k tokens then). 1 <= k <= size.
std::vector<KeptToken> TopKByLogit(std::span<const float> logits, size_t k);

}  // namespace peregrine
