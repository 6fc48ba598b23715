// Chi-square checks of the sampler against a double-precision reference distribution. Seeds are
// fixed, so the statistics are the same on every run: a pass cannot turn into a flake.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "sampling/sampler.h"

namespace peregrine {
namespace {

constexpr int kDraws = 60000;  // per setting
// 7 degrees of freedom at most; P(chi2 > 40) is about 1e-6 for a correct sampler.
constexpr double kChiSquareBound = 40.0;

const std::vector<double> kProbs = {0.3, 0.2, 0.15, 0.11, 0.09, 0.08, 0.05, 0.02};

// The distribution Sample() should draw from, computed independently in double with a full sort.
std::vector<double> Reference(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t n = logits.size();
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = std::exp((logits[i] - max_logit) / p.temperature);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  std::vector<bool> kept(n, true);
  if (p.top_k > 0) {
    for (size_t r = static_cast<size_t>(p.top_k); r < n; ++r) kept[order[r]] = false;
  }
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += kept[i] ? w[i] : 0.0;
    double cumulative = 0.0;
    bool reached = false;
    for (const size_t i : order) {
      if (!kept[i]) continue;
      if (reached) kept[i] = false;
      cumulative += w[i];
      reached = reached || cumulative >= p.top_p * total;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (w[i] < p.min_p) kept[i] = false;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += kept[i] ? w[i] : 0.0;
  std::vector<double> q(n);
  for (size_t i = 0; i < n; ++i) q[i] = kept[i] ? w[i] / total : 0.0;
  return q;
}

// Draws `draws` tokens for the ids in `ids` and checks them against Reference().
void CheckDistribution(const std::vector<float>& logits, const std::vector<int32_t>& ids, const SamplingParams& p,
                       int draws) {
  std::vector<double> expected_small;
  std::vector<float> small_logits;
  for (const int32_t id : ids) small_logits.push_back(logits[static_cast<size_t>(id)]);
  expected_small = Reference(small_logits, p);
  SequenceSamplingState state(p, {});
  std::vector<int64_t> counts(ids.size(), 0);
  std::vector<float> row(logits.size());
  for (int d = 0; d < draws; ++d) {
    std::copy(logits.begin(), logits.end(), row.begin());
    const int32_t token = Sample(row, p, state).token;
    const auto at = std::find(ids.begin(), ids.end(), token);
    ASSERT_NE(at, ids.end()) << "drew token " << token << " which has probability 0";
    ++counts[static_cast<size_t>(at - ids.begin())];
  }
  double chi_square = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const double expected = draws * expected_small[i];
    if (expected == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << ids[i] << " should have been truncated";
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - expected;
    chi_square += diff * diff / expected;
  }
  EXPECT_LT(chi_square, kChiSquareBound);
}

std::vector<SamplingParams> Settings() {
  std::vector<SamplingParams> s(6);
  for (SamplingParams& p : s) p.seed = 20240601;
  s[1].temperature = 0.7f;
  s[2].top_k = 4;
  s[3].top_p = 0.7f;
  s[4].min_p = 0.3f;
  s[5].temperature = 1.6f;
  s[5].top_k = 6;
  s[5].top_p = 0.9f;
  s[5].min_p = 0.1f;
  return s;
}

TEST(SamplerStatisticsTest, SmallVocabularyMatchesTheReference) {
  std::vector<float> logits;
  for (const double p : kProbs) logits.push_back(static_cast<float>(std::log(p)));
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const SamplingParams& p : Settings()) CheckDistribution(logits, ids, p, kDraws);
}

// The same eight tokens spread over several 1024-token blocks of a larger vocabulary whose
// other logits are -inf: exercises the blocked whole-vocabulary walk and the gathers.
TEST(SamplerStatisticsTest, SpreadOverBlocksMatchesTheReference) {
  std::vector<float> logits(2100, -std::numeric_limits<float>::infinity());
  const std::vector<int32_t> ids = {5, 1023, 1024, 1500, 2047, 2048, 2070, 2099};
  for (size_t i = 0; i < ids.size(); ++i) {
    logits[static_cast<size_t>(ids[i])] = static_cast<float>(std::log(kProbs[i]));
  }
  for (const SamplingParams& p : Settings()) CheckDistribution(logits, ids, p, kDraws / 2);
}

}  // namespace
}  // namespace peregrine
