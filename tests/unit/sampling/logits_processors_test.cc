#include "sampling/logits_processors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace peregrine {
namespace {

using Counts = std::unordered_map<int32_t, int32_t>;

TEST(LogitBiasTest, AddsToTheNamedTokensOnly) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<std::pair<int32_t, float>> bias = {{1, -100.0f}, {3, 0.5f}};
  ApplyLogitBias(logits, bias, nullptr);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -98.0f, 3.0f, 4.5f}));
}

TEST(LogitBiasTest, IgnoresIdsOutsideTheVocabulary) {
  std::vector<float> logits = {1.0f, 2.0f};
  const std::vector<std::pair<int32_t, float>> bias = {{-1, 5.0f}, {2, 5.0f}, {1000000, 5.0f}};
  ApplyLogitBias(logits, bias, nullptr);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f}));
}

TEST(LogitBiasTest, SavesRawValues) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  std::vector<SavedLogit> saved;
  ApplyLogitBias(logits, std::vector<std::pair<int32_t, float>>{{2, 1.0f}}, &saved);
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].token, 2);
  EXPECT_EQ(saved[0].logit, 3.0f);
}

TEST(RepetitionPenaltyTest, DividesPositiveAndMultipliesNegativeLogits) {
  std::vector<float> logits = {2.0f, -2.0f, 3.0f, 0.0f, 5.0f};
  const Counts prompt = {{0, 3}, {3, 1}};
  const Counts generated = {{1, 1}, {0, 2}};
  std::vector<SavedLogit> saved;
  ApplyRepetitionPenalty(logits, 2.0f, prompt, generated, &saved);
  // Token 0 is in both and is penalised once; token 2 and 4 are unseen.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 3.0f, 0.0f, 5.0f}));
  EXPECT_EQ(saved.size(), 3u);
}

TEST(RepetitionPenaltyTest, PenaltyBelowOneRewardsRepetition) {
  std::vector<float> logits = {2.0f, -2.0f};
  ApplyRepetitionPenalty(logits, 0.5f, Counts{}, Counts{{0, 1}, {1, 1}}, nullptr);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, -1.0f}));
}

TEST(RepetitionPenaltyTest, OneIsANoOp) {
  std::vector<float> logits = {2.0f, -2.0f};
  std::vector<SavedLogit> saved;
  ApplyRepetitionPenalty(logits, 1.0f, Counts{{0, 1}}, Counts{{1, 1}}, &saved);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -2.0f}));
  EXPECT_TRUE(saved.empty());
}

TEST(PresenceFrequencyTest, MatchesOpenAIFormula) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  const Counts generated = {{1, 1}, {2, 3}, {7, 2}};  // 7 is outside the vocabulary
  ApplyPresenceFrequencyPenalties(logits, 0.5f, 0.25f, generated, nullptr);
  // logit - presence * (count > 0) - frequency * count
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
}

TEST(PresenceFrequencyTest, NegativePenaltiesEncourageRepetition) {
  std::vector<float> logits = {0.0f, 0.0f};
  ApplyPresenceFrequencyPenalties(logits, -2.0f, -1.0f, Counts{{0, 4}}, nullptr);
  EXPECT_FLOAT_EQ(logits[0], 6.0f);
  EXPECT_FLOAT_EQ(logits[1], 0.0f);
}

TEST(PresenceFrequencyTest, ZeroPenaltiesAreANoOp) {
  std::vector<float> logits = {0.5f};
  std::vector<SavedLogit> saved;
  ApplyPresenceFrequencyPenalties(logits, 0.0f, 0.0f, Counts{{0, 4}}, &saved);
  EXPECT_EQ(logits[0], 0.5f);
  EXPECT_TRUE(saved.empty());
}

}  // namespace
}  // namespace peregrine
