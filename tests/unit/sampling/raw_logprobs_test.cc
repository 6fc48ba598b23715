#include "sampling/raw_logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace peregrine {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// log-softmax in long double, summed in sorted order: an independent reference.
std::vector<double> ReferenceLogSoftmax(const std::vector<float>& logits) {
  std::vector<long double> shifted;
  const long double max_logit = *std::max_element(logits.begin(), logits.end());
  for (const float l : logits) shifted.push_back(std::exp(static_cast<long double>(l) - max_logit));
  std::sort(shifted.begin(), shifted.end());
  long double sum = 0.0L;
  for (const long double v : shifted) sum += v;
  std::vector<double> out;
  for (const float l : logits) out.push_back(static_cast<double>(l - max_logit - std::log(sum)));
  return out;
}

std::vector<float> RandomLogits(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> logits(n);
  for (float& l : logits) l = static_cast<float>(static_cast<int64_t>(rng() % 2000001) - 1000000) * 2e-5f;
  return logits;
}

TEST(RawLogprobsTest, MatchesALongDoubleReference) {
  const std::vector<float> logits = RandomLogits(50000, 3);
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  const RawLogprobs raw = ComputeRawLogprobs(logits, 20);
  double worst = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double got = RawLogprob(logits[i], raw);
    // Only the final rounding to float is allowed: half an ulp of the reference value.
    const float rounded = static_cast<float>(reference[i]);
    const double half_ulp = 0.5 * (std::nextafter(std::abs(rounded), kInf) - std::abs(rounded));
    worst = std::max(worst, std::abs(got - reference[i]) / half_ulp);
  }
  EXPECT_LE(worst, 1.0001);
}

TEST(RawLogprobsTest, TopListIsMostLikelyFirstWithTiesByLowerId) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, kNan, 2.0f, -kInf, 0.5f};
  const RawLogprobs raw = ComputeRawLogprobs(logits, 5);
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : raw.top) ids.push_back(t.token);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2, 5, 0}));
  for (const TokenLogprob& t : raw.top) {
    EXPECT_EQ(t.logprob, RawLogprob(logits[static_cast<size_t>(t.token)], raw));
  }
  EXPECT_TRUE(ComputeRawLogprobs(logits, 0).top.empty());
  EXPECT_EQ(ComputeRawLogprobs(logits, 20).top.size(), logits.size());
}

TEST(RawLogprobsTest, NonNumbersGiveMinusInfinityNotNaN) {
  const RawLogprobs raw = ComputeRawLogprobs(std::vector<float>{kNan, 0.0f, -kInf}, 3);
  EXPECT_EQ(RawLogprob(kNan, raw), -kInf);
  EXPECT_EQ(RawLogprob(-kInf, raw), -kInf);
  EXPECT_FLOAT_EQ(RawLogprob(0.0f, raw), 0.0f);
  const RawLogprobs all_nan = ComputeRawLogprobs(std::vector<float>{kNan, kNan}, 2);
  for (const TokenLogprob& t : all_nan.top) EXPECT_FALSE(std::isnan(t.logprob));
}

TEST(SampleLogprobsTest, AreRawLogprobsWhateverTheProcessors) {
  const std::vector<float> logits = RandomLogits(1000, 9);
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  SamplingParams p;
  p.seed = 5;
  p.logprobs = 3;
  p.temperature = 0.3f;
  p.top_k = 5;
  p.logit_bias = {{17, 100.0f}};
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {17, 2, 3};
  SequenceSamplingState state(p, prompt);
  state.Append(17);
  std::vector<float> row = logits;
  const SampleResult r = Sample(row, p, state);
  EXPECT_EQ(r.token, 17);  // forced by the bias
  EXPECT_NEAR(r.logprob, reference[17], 1e-6 * std::abs(reference[17]));
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  std::vector<size_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.top_logprobs[i].token, static_cast<int32_t>(order[i]));
    EXPECT_NEAR(r.top_logprobs[i].logprob, reference[order[i]], 1e-6 * std::abs(reference[order[i]]) + 1e-7);
  }
}

TEST(SampleLogprobsTest, NoneRequestedNoneReturned) {
  SamplingParams p;
  p.seed = 5;
  SequenceSamplingState state(p, {});
  std::vector<float> row = {0.0f, 1.0f};
  const SampleResult r = Sample(row, p, state);
  EXPECT_EQ(r.logprob, 0.0f);
  EXPECT_TRUE(r.top_logprobs.empty());
  p.logprobs = 0;
  std::vector<float> row2 = {0.0f, 0.0f};
  const SampleResult r0 = Sample(row2, p, state);
  EXPECT_TRUE(r0.top_logprobs.empty());
  EXPECT_NEAR(r0.logprob, std::log(0.5), 1e-7);
}

TEST(ScoreTokenTest, ReportsTheTokensLogprobRankAndAlternatives) {
  const std::vector<float> logits = RandomLogits(5000, 17);
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  for (const int32_t token : {0, 1234, 4999}) {
    const SampleResult s = ScoreToken(logits, token, 5);
    EXPECT_EQ(s.token, token);
    EXPECT_NEAR(s.logprob, reference[static_cast<size_t>(token)], 1e-5);
    int64_t above = 0;
    for (const float l : logits) above += l > logits[static_cast<size_t>(token)];
    EXPECT_EQ(s.rank, above + 1);
    ASSERT_EQ(s.top_logprobs.size(), 5u);
    for (const TokenLogprob& t : s.top_logprobs)
      EXPECT_NEAR(t.logprob, reference[static_cast<size_t>(t.token)], 1e-5);
    for (size_t i = 1; i < s.top_logprobs.size(); ++i)
      EXPECT_GE(s.top_logprobs[i - 1].logprob, s.top_logprobs[i].logprob);
  }
}

TEST(ScoreTokenTest, TiesShareARankAndNanRanksLast) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, kNan, -kInf, 2.0f};
  EXPECT_EQ(ScoreToken(logits, 1, 0).rank, 1);
  EXPECT_EQ(ScoreToken(logits, 2, 0).rank, 1);
  EXPECT_EQ(ScoreToken(logits, 5, 0).rank, 3);
  EXPECT_EQ(ScoreToken(logits, 0, 0).rank, 4);
  // NaN counts as -inf: every finite logit is above it, the -inf one is not.
  EXPECT_EQ(ScoreToken(logits, 3, 0).rank, 5);
  EXPECT_EQ(ScoreToken(logits, 3, 0).logprob, -kInf);
  EXPECT_EQ(ScoreToken(logits, 4, 0).logprob, -kInf);
  EXPECT_TRUE(ScoreToken(logits, 1, 0).top_logprobs.empty());
}

}  // namespace
}  // namespace peregrine
