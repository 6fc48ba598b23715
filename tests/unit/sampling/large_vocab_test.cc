// DeepSeek-V4's vocabulary size (129280): the partial-selection paths against a full sort, and a
// speed sanity run (it only has to finish; timing is the benchmark's job).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/truncation.h"

namespace peregrine {
namespace {

constexpr size_t kVocab = 129280;

// A Gaussian background with a few peaked tokens, roughly like a language model's logits.
std::vector<float> ModelLikeLogits(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  std::vector<float> logits(kVocab);
  for (float& l : logits) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));  // drawn first: a fixed order
    l = static_cast<float>(2.0 * radius * std::cos(6.283185307179586 * uniform()));
  }
  for (int peak = 0; peak < 6; ++peak) logits[rng() % kVocab] = 9.0f + static_cast<float>(peak) * 0.7f;
  return logits;
}

// Token ids most likely first, ties by lower id: the full sort the sampler avoids.
std::vector<int32_t> SortedOrder(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return order;
}

// Reference over the same float weights as the sampler (only sums differ in order).
std::vector<int32_t> NaiveKept(const std::vector<float>& logits, const std::vector<int32_t>& order,
                               const SamplingParams& p) {
  const float max_logit = logits[order[0]];
  const float inv_t = InverseTemperature(p.temperature);
  size_t count = order.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < count) {
    const float kth = logits[order[static_cast<size_t>(p.top_k) - 1]];
    while (logits[order[count - 1]] < kth) --count;
  }
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (size_t r = 0; r < count; ++r) total += TemperatureWeight(logits[order[r]], max_logit, inv_t);
    double cumulative = 0.0;
    for (size_t r = 0; r < count; ++r) {
      cumulative += TemperatureWeight(logits[order[r]], max_logit, inv_t);
      if (cumulative >= p.top_p * total) {
        count = r + 1;
        break;
      }
    }
  }
  std::vector<int32_t> kept;
  for (size_t r = 0; r < count; ++r) {
    if (TemperatureWeight(logits[order[r]], max_logit, inv_t) >= p.min_p) kept.push_back(order[r]);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<SamplingParams> Settings() {
  std::vector<SamplingParams> s;
  for (const float t : {0.3f, 0.8f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.seed = 77;
    p.temperature = t;
    for (const int32_t k : {1, 50, 1000, 20000}) {
      p.top_k = k;
      s.push_back(p);
    }
    p.top_k = 0;
    for (const float top_p : {0.5f, 0.9f, 0.95f, 0.999f}) {
      p.top_p = top_p;
      s.push_back(p);
    }
    p.top_p = 1.0f;
    for (const float min_p : {0.001f, 0.05f, 0.5f}) {
      p.min_p = min_p;
      s.push_back(p);
    }
    p.top_k = 100;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    s.push_back(p);
  }
  return s;
}

TEST(LargeVocabTest, TruncationMatchesAFullSort) {
  const std::vector<float> logits = ModelLikeLogits(1);
  const std::vector<int32_t> order = SortedOrder(logits);
  for (const SamplingParams& p : Settings()) {
    std::vector<int32_t> got;
    for (const KeptToken& c : TruncateDistribution(logits, InverseTemperature(p.temperature), p)) {
      got.push_back(c.token);
    }
    EXPECT_EQ(got, NaiveKept(logits, order, p)) << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p
                                         << " min_p=" << p.min_p;
  }
}

TEST(LargeVocabTest, DrawsStayInsideTheKeptSet) {
  const std::vector<float> logits = ModelLikeLogits(2);
  const std::vector<int32_t> order = SortedOrder(logits);
  std::vector<float> row(logits.size());
  for (const SamplingParams& p : Settings()) {
    const std::vector<int32_t> kept = NaiveKept(logits, order, p);
    const std::set<int32_t> allowed(kept.begin(), kept.end());
    SequenceSamplingState state(p, {});
    for (int i = 0; i < 5; ++i) {
      std::copy(logits.begin(), logits.end(), row.begin());
      EXPECT_TRUE(allowed.count(Sample(row, p, state).token));
    }
  }
}

TEST(LargeVocabTest, GreedyFullVocabularyAndLogprobsRun) {
  std::vector<float> logits = ModelLikeLogits(3);
  logits[kVocab - 1] = 100.0f;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 20;
  SequenceSamplingState state(greedy, {});
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row = logits;
    const SampleResult r = Sample(row, greedy, state);
    EXPECT_EQ(r.token, static_cast<int32_t>(kVocab - 1));
    ASSERT_EQ(r.top_logprobs.size(), 20u);
    EXPECT_EQ(r.top_logprobs[0].token, r.token);
  }
  SamplingParams full;
  full.seed = 4;
  SequenceSamplingState full_state(full, {});
  std::vector<float> row = ModelLikeLogits(4);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(Sample(row, full, full_state).token);
  EXPECT_GT(seen.size(), 3u);
}

}  // namespace
}  // namespace peregrine
