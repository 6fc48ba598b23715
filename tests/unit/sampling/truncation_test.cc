#include "sampling/truncation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sampling/argmax.h"

namespace peregrine {
namespace {

// p = {0.5, 0.3, 0.15, 0.05}: weights relative to the maximum {1, 0.6, 0.3, 0.1}.
std::vector<float> FourTokens() {
  return {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
}

std::vector<int32_t> Kept(const std::vector<float>& logits, const SamplingParams& p) {
  const float max_logit = MaxLogit(logits);
  std::vector<int32_t> ids;
  for (const KeptToken& c : TruncateDistribution(logits, InverseTemperature(p.temperature), p)) {
    EXPECT_EQ(c.logit, logits[static_cast<size_t>(c.token)]);
    EXPECT_EQ(c.weight, TemperatureWeight(c.logit, max_logit, InverseTemperature(p.temperature)));
    ids.push_back(c.token);
  }
  return ids;
}

using Ids = std::vector<int32_t>;

SamplingParams WithTopK(int32_t k) {
  SamplingParams p;
  p.top_k = k;
  return p;
}

SamplingParams WithTopP(float top_p) {
  SamplingParams p;
  p.top_p = top_p;
  return p;
}

SamplingParams WithMinP(float min_p) {
  SamplingParams p;
  p.min_p = min_p;
  return p;
}

TEST(TruncationTest, HasTruncation) {
  EXPECT_FALSE(HasTruncation(SamplingParams{}, 4));
  EXPECT_FALSE(HasTruncation(WithTopK(-1), 4));
  EXPECT_FALSE(HasTruncation(WithTopK(4), 4));
  EXPECT_TRUE(HasTruncation(WithTopK(3), 4));
  EXPECT_TRUE(HasTruncation(WithTopP(0.99f), 4));
  EXPECT_TRUE(HasTruncation(WithMinP(0.01f), 4));
}

TEST(TruncationTest, TopK) {
  EXPECT_EQ(Kept(FourTokens(), WithTopK(1)), (Ids{0}));
  EXPECT_EQ(Kept(FourTokens(), WithTopK(2)), (Ids{0, 1}));
  EXPECT_EQ(Kept(FourTokens(), WithTopK(3)), (Ids{0, 1, 2}));
}

TEST(TruncationTest, TopKKeepsTiesWithTheKthLogit) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f, 3.0f};
  EXPECT_EQ(Kept(logits, WithTopK(1)), (Ids{5}));
  EXPECT_EQ(Kept(logits, WithTopK(2)), (Ids{1, 2, 3, 5}));
  EXPECT_EQ(Kept(logits, WithTopK(4)), (Ids{1, 2, 3, 5}));
  EXPECT_EQ(Kept(logits, WithTopK(5)), (Ids{0, 1, 2, 3, 5}));
}

TEST(TruncationTest, TopPKeepsTheSmallestPrefixReachingP) {
  EXPECT_EQ(Kept(FourTokens(), WithTopP(0.49f)), (Ids{0}));
  EXPECT_EQ(Kept(FourTokens(), WithTopP(0.51f)), (Ids{0, 1}));
  EXPECT_EQ(Kept(FourTokens(), WithTopP(0.79f)), (Ids{0, 1}));
  EXPECT_EQ(Kept(FourTokens(), WithTopP(0.81f)), (Ids{0, 1, 2}));
  EXPECT_EQ(Kept(FourTokens(), WithTopP(0.96f)), (Ids{0, 1, 2, 3}));
}

TEST(TruncationTest, TinyTopPKeepsOnlyTheMostLikelyToken) {
  EXPECT_EQ(Kept(FourTokens(), WithTopP(1e-7f)), (Ids{0}));
  const std::vector<float> flat(50, 0.25f);
  EXPECT_EQ(Kept(flat, WithTopP(1e-7f)), (Ids{0}));  // ties go to the lowest id
}

TEST(TruncationTest, TopPOnTiesPrefersLowerIds) {
  const std::vector<float> flat(1000, -3.0f);
  const Ids kept = Kept(flat, WithTopP(0.5f));
  ASSERT_EQ(kept.size(), 500u);
  EXPECT_EQ(kept.front(), 0);
  EXPECT_EQ(kept.back(), 499);
}

TEST(TruncationTest, TopPAppliesToTheTopKRenormalisedDistribution) {
  // Top-3 renormalised: {0.526, 0.316, 0.158}; 0.842 >= 0.83 after two tokens (un-renormalised
  // it would be 0.8 and need a third).
  SamplingParams p = WithTopK(3);
  p.top_p = 0.83f;
  EXPECT_EQ(Kept(FourTokens(), p), (Ids{0, 1}));
}

TEST(TruncationTest, MinPIsRelativeToTheMostLikelyToken) {
  EXPECT_EQ(Kept(FourTokens(), WithMinP(0.05f)), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(Kept(FourTokens(), WithMinP(0.2f)), (Ids{0, 1, 2}));
  EXPECT_EQ(Kept(FourTokens(), WithMinP(0.35f)), (Ids{0, 1}));
  EXPECT_EQ(Kept(FourTokens(), WithMinP(1.0f)), (Ids{0}));
  SamplingParams with_top_p = WithTopP(0.96f);
  with_top_p.min_p = 0.2f;
  EXPECT_EQ(Kept(FourTokens(), with_top_p), (Ids{0, 1, 2}));
}

TEST(TruncationTest, TemperatureSharpensBeforeTruncation) {
  // At T = 0.5 the weights are squared: p = {0.685, 0.247, 0.062, 0.007}.
  SamplingParams p = WithTopP(0.9f);
  EXPECT_EQ(Kept(FourTokens(), p), (Ids{0, 1, 2}));
  p.temperature = 0.5f;
  EXPECT_EQ(Kept(FourTokens(), p), (Ids{0, 1}));
  SamplingParams m = WithMinP(0.05f);
  m.temperature = 0.5f;
  EXPECT_EQ(Kept(FourTokens(), m), (Ids{0, 1, 2}));
}

TEST(TruncationTest, NonNumbersAreNeverKept) {
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {nan, 1.0f, -inf, 0.5f, nan};
  EXPECT_EQ(Kept(logits, WithTopK(2)), (Ids{1, 3}));
  EXPECT_EQ(Kept(logits, WithTopP(0.99f)), (Ids{1, 3}));
  EXPECT_EQ(Kept(logits, WithMinP(0.01f)), (Ids{1, 3}));
}

// Reference: sort everything most likely first, ties by id.
std::vector<int32_t> NaiveTopK(const std::vector<float>& logits, size_t k) {
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const float kth = sorted[k - 1];
  Ids ids;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= kth) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

TEST(TopKByLogitTest, MatchesAFullSort) {
  std::mt19937_64 rng(5);
  for (const int levels : {1000000, 7}) {  // distinct values, then heavy ties
    std::vector<float> logits(5000);
    for (float& l : logits) l = static_cast<float>(rng() % static_cast<uint64_t>(levels)) / 100.0f;
    for (const size_t k : {1u, 2u, 3u, 100u, 255u, 256u, 1000u, 4999u, 5000u}) {
      std::vector<KeptToken> kept = TopKByLogit(logits, k);
      Ids ids;
      for (const KeptToken& c : kept) ids.push_back(c.token);
      std::sort(ids.begin(), ids.end());
      EXPECT_EQ(ids, NaiveTopK(logits, k)) << "k=" << k << " levels=" << levels;
    }
  }
}

}  // namespace
}  // namespace peregrine
