// Log-softmax of the raw model logits, in double: what the API reports as logprobs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace peregrine {

struct RawLogprobs {
  double log_normalizer = 0.0;        // log(sum(exp(logits))), computed stably
  std::vector<TokenLogprob> top;      // the num_top most likely tokens, ties by lower id
};

// One pass for the top list, one for the maximum, one for the normalizer (exponentials in double).
// NaN logits count as -inf.
// `top` has min(num_top, logits.size()) entries.
RawLogprobs ComputeRawLogprobs(std::span<const float> logits, int32_t num_top);

// log p of a token whose raw logit is `logit`; -inf instead of NaN in degenerate rows
// (every logit -inf or NaN, or an infinite maximum).
float RawLogprob(float logit, const RawLogprobs& raw);

}  // namespace peregrine
