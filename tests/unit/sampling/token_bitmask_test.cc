#include "sampling/token_bitmask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace peregrine {
namespace {

TEST(TokenBitmaskTest, MaskedIdsBecomeMinusInfinityAndTheRestStay) {
  std::vector<float> logits(70);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i);
  // Allowed: 1, 31, 32, 69.
  const std::vector<uint32_t> words = {(1u << 1) | (1u << 31), 1u, 1u << 5};
  ApplyTokenBitmask(logits, words);
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool allowed = i == 1 || i == 31 || i == 32 || i == 69;
    if (allowed) {
      EXPECT_EQ(logits[i], static_cast<float>(i));
    } else {
      EXPECT_TRUE(std::isinf(logits[i]) && logits[i] < 0) << i;
    }
  }
}

TEST(TokenBitmaskTest, SamplingAfterTheMaskOnlyPicksAllowedTokens) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (float temperature : {0.0f, 1.0f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.logprobs = 3;
    params.seed = 17;
    SequenceSamplingState state(params, {});
    for (int step = 0; step < 50; ++step) {
      std::vector<float> logits(1000);
      for (float& x : logits) x = 3.0f * normal(rng);
      std::vector<uint32_t> words((logits.size() + 31) / 32, 0u);
      std::vector<int32_t> allowed;
      for (int32_t id = static_cast<int32_t>(rng() % 7); id < 1000; id += 97) {
        words[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
        allowed.push_back(id);
      }
      ApplyTokenBitmask(logits, words);
      const SampleResult r = Sample(logits, params, state);
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), r.token), allowed.end()) << r.token;
      for (const auto& top : r.top_logprobs) {
        if (std::isfinite(top.logprob)) {
          EXPECT_NE(std::find(allowed.begin(), allowed.end(), top.token), allowed.end());
        }
      }
    }
  }
}

}  // namespace
}  // namespace peregrine
