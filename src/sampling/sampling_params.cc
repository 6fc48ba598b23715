// ValidateSamplingParams: the ranges the sampler relies on (robustness rows 7, 13, 14).
// Messages are fixed strings: the values came from the client and are never echoed.
#include "sampling/sampling_params.h"

#include <algorithm>
#include <cmath>

namespace peregrine {
namespace {

static_assert(kMaxLogitBiasEntries == 1024 && kMaxTopLogprobs == 20 && kMaxTemperature == 2.0f &&
                  kMaxAbsPenalty == 2.0f && kMaxRepetitionPenalty == 2.0f && kMaxAbsLogitBias == 100.0f,
              "the messages below spell these limits out");

// NaN fails every comparison, so `InClosed` also rejects it; the isfinite check is for clarity.
bool InClosed(float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; }

Status CheckLogitBias(const std::vector<std::pair<int32_t, float>>& bias, int64_t vocab_size) {
  if (bias.size() > kMaxLogitBiasEntries)
    return InvalidArgument("'logit_bias' has too many entries (at most 1024)");
  for (const auto& [token, value] : bias) {
    if (token < 0 || token >= vocab_size)
      return InvalidArgument("'logit_bias' has a token id outside the vocabulary");
    if (!InClosed(value, -kMaxAbsLogitBias, kMaxAbsLogitBias))
      return InvalidArgument("'logit_bias' values must be finite numbers in [-100, 100]");
  }
  std::vector<int32_t> ids;
  ids.reserve(bias.size());
  for (const auto& entry : bias) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
    return InvalidArgument("'logit_bias' has a repeated token id");
  return Status::Ok();
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab_size) {
  if (vocab_size <= 0) return InvalidArgument("vocabulary size must be positive");
  if (p.min_tokens < 0) return InvalidArgument("'min_tokens' must not be negative");
  if (!InClosed(p.temperature, 0.0f, kMaxTemperature))
    return InvalidArgument("'temperature' must be a finite number in [0, 2]");
  if (!InClosed(p.top_p, 0.0f, 1.0f) || p.top_p == 0.0f)
    return InvalidArgument("'top_p' must be a finite number in (0, 1]");
  if (p.top_k < -1) return InvalidArgument("'top_k' must be -1, 0 (disabled) or positive");
  if (!InClosed(p.min_p, 0.0f, 1.0f)) return InvalidArgument("'min_p' must be a finite number in [0, 1]");
  if (!InClosed(p.presence_penalty, -kMaxAbsPenalty, kMaxAbsPenalty))
    return InvalidArgument("'presence_penalty' must be a finite number in [-2, 2]");
  if (!InClosed(p.frequency_penalty, -kMaxAbsPenalty, kMaxAbsPenalty))
    return InvalidArgument("'frequency_penalty' must be a finite number in [-2, 2]");
  if (!InClosed(p.repetition_penalty, 0.0f, kMaxRepetitionPenalty) || p.repetition_penalty == 0.0f)
    return InvalidArgument("'repetition_penalty' must be a finite number in (0, 2]");
  PG_RETURN_IF_ERROR(CheckLogitBias(p.logit_bias, vocab_size));
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs)
    return InvalidArgument("'logprobs' must be in [0, 20] when given");
  return Status::Ok();
}

}  // namespace peregrine
