#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace peregrine {
namespace {

TEST(SequenceSamplingStateTest, CountsGeneratedTokens) {
  SamplingParams p;
  p.seed = 1;
  const std::vector<int32_t> prompt = {4, 4, 9};
  SequenceSamplingState state(p, prompt);
  EXPECT_TRUE(state.generated_counts().empty());
  state.Append(4);
  state.Append(7);
  state.Append(4);
  EXPECT_EQ(state.generated_counts().size(), 2u);
  EXPECT_EQ(state.generated_counts().at(4), 2);
  EXPECT_EQ(state.generated_counts().at(7), 1);
}

TEST(SequenceSamplingStateTest, CountsThePromptOnlyForTheRepetitionPenalty) {
  const std::vector<int32_t> prompt = {4, 4, 9};
  SamplingParams without;
  EXPECT_TRUE(SequenceSamplingState(without, prompt).prompt_counts().empty());
  SamplingParams with;
  with.repetition_penalty = 1.2f;
  SequenceSamplingState state(with, prompt);
  EXPECT_EQ(state.prompt_counts().size(), 2u);
  EXPECT_EQ(state.prompt_counts().at(4), 2);
  EXPECT_EQ(state.prompt_counts().at(9), 1);
  state.Append(9);
  EXPECT_EQ(state.prompt_counts().at(9), 1);  // generated tokens are counted separately
}

TEST(SequenceSamplingStateTest, SeededStateStartsTheStandardEngine) {
  SamplingParams p;
  p.seed = 0xDEADBEEFCAFEull;
  SequenceSamplingState state(p, {});
  EXPECT_EQ(state.seed(), 0xDEADBEEFCAFEull);
  std::mt19937_64 reference(0xDEADBEEFCAFEull);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(state.rng()(), reference());
}

TEST(SequenceSamplingStateTest, UnseededStatesDrawDistinctSeeds) {
  SamplingParams p;
  SequenceSamplingState a(p, {});
  SequenceSamplingState b(p, {});
  EXPECT_NE(a.seed(), b.seed());  // fails with probability 2^-64
  std::mt19937_64 reference(a.seed());
  EXPECT_EQ(a.rng()(), reference());
}

}  // namespace
}  // namespace peregrine
