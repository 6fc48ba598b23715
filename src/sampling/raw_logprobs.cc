// ComputeRawLogprobs and RawLogprob.
#include "sampling/raw_logprobs.h"

#include <cmath>
#include <limits>

#include "sampling/argmax.h"

namespace peregrine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float Sanitized(float logit) { return std::isnan(logit) ? kNegInf : logit; }

// The num_top largest (logit, id) pairs, most likely first, ties by lower id. A token enters only
// when it beats the current last entry strictly, so an earlier (lower) id keeps a tie.
std::vector<TokenLogprob> TopByLogit(std::span<const float> logits, size_t num_top) {
  std::vector<TokenLogprob> top;  // logprob holds the raw logit until the caller converts it
  top.reserve(num_top + 1);
  if (num_top == 0) return top;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = Sanitized(logits[i]);
    if (top.size() == num_top && !(logit > top.back().logprob)) continue;
    size_t pos = top.size();
    while (pos > 0 && logit > top[pos - 1].logprob) --pos;
    top.insert(top.begin() + static_cast<std::ptrdiff_t>(pos), {static_cast<int32_t>(i), logit});
    if (top.size() > num_top) top.pop_back();
  }
  return top;
}

}  // namespace

RawLogprobs ComputeRawLogprobs(std::span<const float> logits, int32_t num_top) {
  RawLogprobs raw;
  raw.top = TopByLogit(logits, num_top > 0 ? static_cast<size_t>(num_top) : 0);
  const double max_logit = MaxLogit(logits);
  if (!std::isfinite(max_logit)) {
    raw.log_normalizer = max_logit;
  } else {
    double sum = 0.0;
    for (const float logit : logits) {
      if (logit > kNegInf) sum += std::exp(static_cast<double>(logit) - max_logit);
    }
    raw.log_normalizer = max_logit + std::log(sum);
  }
  for (TokenLogprob& entry : raw.top) entry.logprob = RawLogprob(entry.logprob, raw);
  return raw;
}

float RawLogprob(float logit, const RawLogprobs& raw) {
  const double logprob = static_cast<double>(Sanitized(logit)) - raw.log_normalizer;
  return std::isnan(logprob) ? kNegInf : static_cast<float>(logprob);
}

}  // namespace peregrine
