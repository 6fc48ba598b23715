// Sample(): processors in place, then greedy argmax or one draw from the truncated
// distribution, then raw logprobs. See sampler.h for the contract.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "base/check.h"
#include "sampling/argmax.h"
#include "sampling/cdf_walk.h"
#include "sampling/logits_processors.h"
#include "sampling/raw_logprobs.h"
#include "sampling/truncation.h"

namespace peregrine {
namespace {

int32_t SampleStochastic(std::span<const float> logits, const SamplingParams& params, double u) {
  const float inv_temperature = InverseTemperature(params.temperature);
  if (!HasTruncation(params, logits.size())) return WalkFullVocab(logits, MaxLogit(logits), inv_temperature, u);
  return WalkKept(TruncateDistribution(logits, inv_temperature, params), u);
}

// The raw logit of `token`: the oldest saved value if a processor changed it.
float RawLogit(std::span<const float> logits, std::span<const SavedLogit> saved, int32_t token) {
  for (const SavedLogit& s : saved) {
    if (s.token == token) return s.logit;
  }
  return logits[static_cast<size_t>(token)];
}

}  // namespace

SampleResult Sample(std::span<float> logits, const SamplingParams& params, SequenceSamplingState& state) {
  PG_CHECK(!logits.empty(), "Sample() needs at least one logit");
  const bool wants_logprobs = params.logprobs >= 0;
  RawLogprobs raw;
  std::vector<SavedLogit> saved;
  std::vector<SavedLogit>* save = wants_logprobs ? &saved : nullptr;
  if (wants_logprobs) raw = ComputeRawLogprobs(logits, params.logprobs);

  ApplyLogitBias(logits, params.logit_bias, save);
  if (state.num_generated() < params.min_tokens) BanTokens(logits, params.min_tokens_stop_ids, save);
  ApplyRepetitionPenalty(logits, params.repetition_penalty, state.prompt_counts(), state.generated_counts(), save);
  ApplyPresenceFrequencyPenalties(logits, params.presence_penalty, params.frequency_penalty,
                                  state.generated_counts(), save);

  SampleResult result;
  // `!(t > 0)` rather than is_greedy(): an unvalidated negative or NaN temperature is greedy too.
  if (!(params.temperature > 0.0f)) {
    result.token = ArgmaxLowestId(logits);
  } else {
    result.token = SampleStochastic(logits, params, UnitIntervalFromBits(state.rng()()));
  }
  if (wants_logprobs) {
    result.logprob = RawLogprob(RawLogit(logits, saved, result.token), raw);
    result.top_logprobs = std::move(raw.top);
  }
  state.Append(result.token);
  return result;
}

SampleResult ScoreToken(std::span<const float> logits, int32_t token, int32_t num_top) {
  PG_CHECK(!logits.empty(), "ScoreToken() needs at least one logit");
  PG_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "ScoreToken(): token outside the logits");
  RawLogprobs raw = ComputeRawLogprobs(logits, std::max(num_top, 0));
  SampleResult result;
  result.token = token;
  result.logprob = RawLogprob(logits[static_cast<size_t>(token)], raw);
  result.top_logprobs = std::move(raw.top);
  const float x = logits[static_cast<size_t>(token)];
  const float own = std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
  int64_t above = 0;
  for (float v : logits) above += v > own;
  result.rank = above + 1;
  return result;
}

}  // namespace peregrine
