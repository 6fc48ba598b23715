#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "sampling/cdf_walk.h"

namespace peregrine {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams Seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

// One parameter set per path through the sampler: whole vocabulary, top-k, top-p, min-p, all three.
std::vector<SamplingParams> PathVariants(uint64_t seed) {
  std::vector<SamplingParams> variants(5, Seeded(seed));
  variants[1].top_k = 2;
  variants[2].top_p = 0.9f;
  variants[3].min_p = 0.1f;
  variants[4].top_k = 3;
  variants[4].top_p = 0.8f;
  variants[4].min_p = 0.05f;
  return variants;
}

int32_t SampleOnce(std::vector<float> logits, const SamplingParams& p) {
  SequenceSamplingState state(p, {});
  return Sample(logits, p, state).token;
}

// Tokens drawn from `logits` (copied afresh every step) over `n` steps of one request.
std::vector<int32_t> Draw(const std::vector<float>& logits, const SamplingParams& p, int n) {
  SequenceSamplingState state(p, {});
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    tokens.push_back(Sample(row, p, state).token);
  }
  return tokens;
}

TEST(GreedyTest, TakesTheArgmaxWithTiesToTheLowestId) {
  SamplingParams p = Seeded(1);
  p.temperature = 0.0f;
  EXPECT_EQ(SampleOnce({0.1f, 0.7f, 0.3f}, p), 1);
  EXPECT_EQ(SampleOnce({0.5f, 0.9f, 0.9f, 0.2f, 0.9f}, p), 1);
  EXPECT_EQ(SampleOnce({2.0f, 2.0f}, p), 0);
  EXPECT_EQ(SampleOnce({-0.0f, 0.0f}, p), 0);
  std::vector<float> long_row(3000, 1.0f);
  long_row[1700] = 2.0f;
  long_row[2900] = 2.0f;
  EXPECT_EQ(SampleOnce(long_row, p), 1700);
}

TEST(GreedyTest, IgnoresNaNAndSurvivesDegenerateRows) {
  SamplingParams p = Seeded(1);
  p.temperature = 0.0f;
  EXPECT_EQ(SampleOnce({kNan, 1.0f, kNan, 3.0f}, p), 3);
  EXPECT_EQ(SampleOnce({-kInf, -kInf, 5.0f}, p), 2);
  EXPECT_EQ(SampleOnce({kNan, kNan}, p), 0);
  EXPECT_EQ(SampleOnce({-kInf, -kInf}, p), 0);
}

TEST(GreedyTest, DrawsNothingFromTheRng) {
  SamplingParams p = Seeded(99);
  p.temperature = 0.0f;
  SequenceSamplingState state(p, {});
  for (int i = 0; i < 10; ++i) {
    std::vector<float> row = {0.0f, 1.0f};
    Sample(row, p, state);
  }
  std::mt19937_64 fresh(99);
  EXPECT_EQ(state.rng()(), fresh());
}

TEST(SamplerTest, EachNonGreedyStepDrawsExactlyOnce) {
  for (const SamplingParams& p : PathVariants(3)) {
    SequenceSamplingState state(p, {});
    for (int i = 0; i < 7; ++i) {
      std::vector<float> row = {0.0f, 1.0f, 0.5f};
      Sample(row, p, state);
    }
    std::mt19937_64 reference(3);
    reference.discard(7);
    EXPECT_EQ(state.rng()(), reference());
  }
}

TEST(SamplerTest, RecordsTheTokenInTheState) {
  SamplingParams p = Seeded(3);
  SequenceSamplingState state(p, {});
  std::vector<float> row = {0.0f, 50.0f};
  const SampleResult r = Sample(row, p, state);
  EXPECT_EQ(r.token, 1);
  EXPECT_EQ(state.generated_counts().at(1), 1);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferentSequence) {
  const std::vector<float> logits = {0.1f, 0.4f, -0.3f, 0.0f, 0.2f, -1.0f, 0.3f, 0.05f};
  for (const SamplingParams& p : PathVariants(42)) {
    const std::vector<int32_t> a = Draw(logits, p, 1000);
    EXPECT_EQ(a, Draw(logits, p, 1000));
    SamplingParams other = p;
    other.seed = 43;
    EXPECT_NE(a, Draw(logits, other, 1000));
    EXPECT_GE(std::set<int32_t>(a.begin(), a.end()).size(), 2u);
  }
}

// Pins the whole chain (mt19937_64, 53-bit u, our exp, the id-order walk) so that a change of
// platform, compiler or implementation that alters seeded output fails here.
TEST(SamplerTest, SeededSequenceIsPinned) {
  const std::vector<float> logits = {0.1f, 0.4f, -0.3f, 0.0f, 0.2f, -1.0f, 0.3f, 0.05f};
  SamplingParams p = Seeded(12345);
  p.temperature = 0.8f;
  const std::vector<int32_t> expected = {2, 2, 5, 4, 4, 1, 0, 5, 3, 1, 0, 0, 3, 4, 7, 3, 1, 0, 0, 2, 0, 7, 5, 7};
  EXPECT_EQ(Draw(logits, p, 24), expected);
}

TEST(SamplerTest, UnitIntervalUsesTheTop53Bits) {
  EXPECT_EQ(UnitIntervalFromBits(0), 0.0);
  EXPECT_EQ(UnitIntervalFromBits(~uint64_t{0}), 1.0 - 0x1.0p-53);
  EXPECT_EQ(UnitIntervalFromBits(uint64_t{1} << 63), 0.5);
  EXPECT_EQ(UnitIntervalFromBits(0x7FF), 0.0);  // the low 11 bits are dropped
}

TEST(SamplerTest, WalkVisitsTokensInIdOrder) {
  const std::vector<KeptToken> kept = {{2, 0.0f, 1.0f}, {5, 0.0f, 0.0f}, {7, 0.0f, 3.0f}};
  EXPECT_EQ(WalkKept(kept, 0.0), 2);
  EXPECT_EQ(WalkKept(kept, 0.2499), 2);
  EXPECT_EQ(WalkKept(kept, 0.25), 7);  // the zero-weight token 5 is never chosen
  EXPECT_EQ(WalkKept(kept, 0.9999999), 7);
  EXPECT_EQ(WalkKept(std::vector<KeptToken>{}, 0.5), 0);
}

TEST(SamplerTest, FullVocabularyWalkMatchesTheKeptWalk) {
  std::vector<float> logits(5000);
  std::mt19937_64 rng(11);
  for (float& l : logits) l = static_cast<float>(rng() % 4000) / 1000.0f;
  const float max_logit = 3.999f;
  std::vector<KeptToken> all;
  for (size_t i = 0; i < logits.size(); ++i) {
    all.push_back({static_cast<int32_t>(i), logits[i], TemperatureWeight(logits[i], max_logit, 1.0f)});
  }
  for (int i = 0; i < 500; ++i) {
    const double u = (i + 0.37) / 500.0;
    EXPECT_EQ(WalkFullVocab(logits, max_logit, 1.0f, u), WalkKept(all, u)) << u;
  }
}

TEST(LogitBiasTest, MinusHundredBansAndPlusHundredForces) {
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  SamplingParams ban = Seeded(8);
  ban.logit_bias = {{1, -100.0f}};
  for (const int32_t t : Draw(logits, ban, 1000)) EXPECT_NE(t, 1);
  SamplingParams force = Seeded(8);
  force.logit_bias = {{3, 100.0f}};
  for (const int32_t t : Draw(logits, force, 1000)) EXPECT_EQ(t, 3);
  SamplingParams greedy_ban = ban;
  greedy_ban.temperature = 0.0f;
  greedy_ban.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Draw(logits, greedy_ban, 1)[0], 1);
}

TEST(PenaltyTest, FrequencyPenaltyChangesGreedyChoiceAfterRepeats) {
  SamplingParams p = Seeded(1);
  p.temperature = 0.0f;
  p.frequency_penalty = 0.4f;
  SequenceSamplingState state(p, {});
  // Token 0 leads by 1.0: after 3 picks its logit is 2.0 - 1.2 < 1.0 - 0.
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> row = {2.0f, 1.0f};
    tokens.push_back(Sample(row, p, state).token);
  }
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 0, 0, 1}));
}

TEST(PenaltyTest, RepetitionPenaltyCoversThePrompt) {
  SamplingParams p = Seeded(1);
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0};
  SequenceSamplingState state(p, prompt);
  std::vector<float> row = {3.0f, 2.0f};  // 3 / 2 = 1.5 < 2
  EXPECT_EQ(Sample(row, p, state).token, 1);
  EXPECT_EQ(row[0], 1.5f);
}

TEST(PenaltyTest, ProcessorsApplyInDocumentedOrder) {
  // bias, then repetition, then presence/frequency: (1 + 3) / 2 - 0.5 - 0.25 = 1.25.
  SamplingParams p = Seeded(1);
  p.temperature = 0.0f;
  p.logit_bias = {{0, 3.0f}};
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  SequenceSamplingState state(p, {});
  state.Append(0);
  std::vector<float> row = {1.0f, 1.3f};
  EXPECT_EQ(Sample(row, p, state).token, 1);
  EXPECT_FLOAT_EQ(row[0], 1.25f);
  std::vector<float> again = {1.0f, 1.2f};
  EXPECT_EQ(Sample(again, p, state).token, 0);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p = Seeded(4);
  p.top_k = 1;
  for (const int32_t t : Draw({0.3f, 0.9f, 0.89f, 0.2f}, p, 200)) EXPECT_EQ(t, 1);
}

TEST(SamplerTest, TopPOneAndDisabledTopKKeepEveryToken) {
  SamplingParams p = Seeded(4);
  p.top_p = 1.0f;
  p.top_k = -1;
  const std::vector<int32_t> t = Draw({0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, p, 400);
  EXPECT_EQ(std::set<int32_t>(t.begin(), t.end()).size(), 5u);
}

TEST(SamplerTest, DegenerateRowsStillGiveATokenInTheVocabulary) {
  for (const SamplingParams& p : PathVariants(2)) {
    for (const int32_t t : Draw({kNan, kNan, kNan}, p, 20)) EXPECT_TRUE(t >= 0 && t < 3) << t;
    for (const int32_t t : Draw({-kInf, -kInf, -kInf}, p, 20)) EXPECT_TRUE(t >= 0 && t < 3) << t;
    for (const int32_t t : Draw({kInf, 1.0f, kInf}, p, 20)) EXPECT_TRUE(t == 0 || t == 2) << t;
    for (const int32_t t : Draw({kNan, -kInf, 2.0f}, p, 20)) EXPECT_EQ(t, 2);
  }
}

TEST(SamplerTest, UnvalidatedParametersStaySafe) {
  SamplingParams p = Seeded(2);
  p.min_p = 5.0f;  // capped at 1: the maximum still survives
  EXPECT_EQ(SampleOnce({0.0f, 1.0f, 0.5f}, p), 1);
  p = Seeded(2);
  p.top_p = -1.0f;  // keeps the most likely token only
  EXPECT_EQ(SampleOnce({0.0f, 1.0f, 0.5f}, p), 1);
  p = Seeded(2);
  p.logprobs = 1 << 30;  // at most one entry per token, no huge reservation
  std::vector<float> row = {0.0f, 1.0f, 0.5f};
  SequenceSamplingState state(p, {});
  EXPECT_EQ(Sample(row, p, state).top_logprobs.size(), 3u);
  p = Seeded(2);
  p.logit_bias = {{-5, 100.0f}, {3, 100.0f}};  // outside the vocabulary: ignored
  p.top_k = -7;
  for (const int32_t t : Draw({0.0f, 0.0f, 0.0f}, p, 50)) EXPECT_LT(t, 3);
}

TEST(SamplerTest, UnvalidatedNegativeOrNaNTemperatureFallsBackToGreedy) {
  SamplingParams p = Seeded(2);
  p.temperature = -1.0f;
  EXPECT_EQ(SampleOnce({0.0f, 1.0f, 0.5f}, p), 1);
  p.temperature = kNan;
  EXPECT_EQ(SampleOnce({0.0f, 1.0f, 0.5f}, p), 1);
}

// min_tokens: the stop ids are out of reach until that many tokens were generated; the raw
// logprobs still see them.
TEST(SamplerTest, MinTokensHoldsTheStopIdsBack) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 1;
  p.min_tokens = 2;
  p.min_tokens_stop_ids = {3, 1};
  SequenceSamplingState state(p, {});
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 9.0f};  // 3, then 1, are the favourites
  std::vector<float> row = logits;
  const SampleResult first = Sample(row, p, state);
  EXPECT_EQ(first.token, 2);
  ASSERT_FALSE(first.top_logprobs.empty());
  EXPECT_EQ(first.top_logprobs[0].token, 3) << "raw logprobs are taken before the ban";
  row = logits;
  EXPECT_EQ(Sample(row, p, state).token, 2);
  EXPECT_EQ(state.num_generated(), 2);
  row = logits;
  EXPECT_EQ(Sample(row, p, state).token, 3) << "the third token may stop";
  // Stochastic sampling never draws a banned id either.
  SamplingParams q = Seeded(7);
  q.min_tokens = 1000;
  q.min_tokens_stop_ids = {3};
  SequenceSamplingState qs(q, {});
  for (int i = 0; i < 200; ++i) {
    row = logits;
    EXPECT_NE(Sample(row, q, qs).token, 3);
  }
}

}  // namespace
}  // namespace peregrine
