// ComputeRawLogprobs and RawLogprob. The normalizer uses ExpNonPositiveDouble (exp.h): double
// accuracy like std::exp, but vectorized and the same on every platform.
#include "sampling/raw_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sampling/argmax.h"
#include "sampling/exp.h"
#include "sampling/fixed_order_sum.h"

namespace peregrine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float Sanitized(float logit) { return std::isnan(logit) ? kNegInf : logit; }

// The num_top largest (logit, id) pairs, most likely first, ties by lower id. A token enters only
// when it beats the current last entry strictly, so an earlier (lower) id keeps a tie.
std::vector<TokenLogprob> TopByLogit(std::span<const float> logits, size_t num_top) {
  constexpr size_t kChunk = 128;
  std::vector<TokenLogprob> top;  // logprob holds the raw logit until the caller converts it
  top.reserve(num_top + 1);
  if (num_top == 0) return top;
  for (size_t begin = 0; begin < logits.size(); begin += kChunk) {
    const size_t end = std::min(logits.size(), begin + kChunk);
    // Once the list is full, a chunk whose (vectorized) maximum does not beat the last entry is skipped.
    if (top.size() == num_top && !(MaxLogit(logits.subspan(begin, end - begin)) > top.back().logprob)) continue;
    for (size_t i = begin; i < end; ++i) {
      const float logit = Sanitized(logits[i]);
      if (top.size() == num_top && !(logit > top.back().logprob)) continue;
      size_t pos = top.size();
      while (pos > 0 && logit > top[pos - 1].logprob) --pos;
      top.insert(top.begin() + static_cast<std::ptrdiff_t>(pos), {static_cast<int32_t>(i), logit});
      if (top.size() > num_top) top.pop_back();
    }
  }
  return top;
}

// sum(exp(logit - max_logit)) in double; -inf and NaN add 0. The exponentials go to a block
// buffer (a vectorized loop) and are added in a fixed order.
PG_VECTOR_CLONES double SumExpBelow(std::span<const float> logits, double max_logit) {
  constexpr size_t kBlock = 256;
  double terms[kBlock];
  double sum = 0.0;
  for (size_t begin = 0; begin < logits.size(); begin += kBlock) {
    const size_t size = std::min(kBlock, logits.size() - begin);
    const float* x = logits.data() + begin;
    for (size_t j = 0; j < size; ++j) terms[j] = ExpNonPositiveDouble(static_cast<double>(x[j]) - max_logit);
    sum += FixedOrderSum(terms, size);
  }
  return sum;
}

}  // namespace

RawLogprobs ComputeRawLogprobs(std::span<const float> logits, int32_t num_top) {
  RawLogprobs raw;
  raw.top = TopByLogit(logits, num_top > 0 ? std::min(static_cast<size_t>(num_top), logits.size()) : 0);
  const double max_logit = MaxLogit(logits);
  if (!std::isfinite(max_logit)) {
    raw.log_normalizer = max_logit;
  } else {
    raw.log_normalizer = max_logit + std::log(SumExpBelow(logits, max_logit));
  }
  for (TokenLogprob& entry : raw.top) entry.logprob = RawLogprob(entry.logprob, raw);
  return raw;
}

float RawLogprob(float logit, const RawLogprobs& raw) {
  const double logprob = static_cast<double>(Sanitized(logit)) - raw.log_normalizer;
  return std::isnan(logprob) ? kNegInf : static_cast<float>(logprob);
}

}  // namespace peregrine
