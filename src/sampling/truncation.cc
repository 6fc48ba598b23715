// Top-k, top-p and min-p without sorting the vocabulary. Top-k keeps a candidate buffer above a
// rising threshold; top-p without top-k buckets the weights by magnitude in one pass, then
// gathers and sorts only the buckets the nucleus reaches; min-p is a threshold on the weight.
#include "sampling/truncation.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "sampling/argmax.h"

namespace peregrine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kBlock = 256;
// Scans skip whole chunks by their (vectorized) maximum before looking at single logits.
constexpr size_t kChunk = 128;

// Weights in [0, 1] are bucketed by their float bits: 4 buckets per power of two down to 2^-40;
// the last bucket holds everything smaller (including 0). Larger weight, smaller bucket.
constexpr uint32_t kOneBits = 0x3F800000u;
constexpr int kBucketShift = 21;
constexpr size_t kNumBuckets = 160;
// Interleaved histograms, so consecutive tokens in one bucket do not wait on each other's add.
constexpr size_t kNumHistograms = 8;
// The bucket sums are added in another order than the nucleus walk; this margin (far above the
// rounding of ~2^17 double additions) makes sure the walk ends inside the gathered buckets.
constexpr double kNucleusMargin = 1e-9;
constexpr float kExponentSlack = 0.01f;

size_t BucketOf(float weight) {
  const uint32_t below_one = kOneBits - std::bit_cast<uint32_t>(weight);
  return std::min<size_t>(below_one >> kBucketShift, kNumBuckets - 1);
}

bool MoreLikely(const KeptToken& a, const KeptToken& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

// Keeps the shortest most-likely-first prefix of `kept` whose weight reaches `target`
// (at least one token); keeps everything if rounding stops the sum short of it.
void KeepNucleusPrefix(std::vector<KeptToken>& kept, double target) {
  double cumulative = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) {
    cumulative += kept[i].weight;
    if (cumulative >= target) {
      kept.resize(i + 1);
      return;
    }
  }
}

// Every token with weight > `floor` (or >= when `inclusive`), weights set. A cheap test on the
// exponent skips the exponential for the many tokens far below the floor; its slack is far wider
// than the 2 ulp error of ExpNonPositive, so no token the exact test keeps is skipped.
std::vector<KeptToken> GatherAbove(std::span<const float> logits, float max_logit, float inv_t,
                                   float floor, bool inclusive) {
  const float exponent_floor = floor > 0.0f ? std::log(floor) - kExponentSlack : kNegInf;
  const auto may_pass = [&](float logit) {
    return logit >= max_logit || (logit - max_logit) * inv_t >= exponent_floor;
  };
  std::vector<KeptToken> kept;
  for (size_t begin = 0; begin < logits.size(); begin += kChunk) {
    const size_t end = std::min(logits.size(), begin + kChunk);
    // The exponent is monotone in the logit: a chunk whose maximum fails fails as a whole.
    if (!may_pass(MaxLogit(logits.subspan(begin, end - begin)))) continue;
    for (size_t i = begin; i < end; ++i) {
      if (!may_pass(logits[i])) continue;
      const float weight = TemperatureWeight(logits[i], max_logit, inv_t);
      if (weight > floor || (inclusive && weight == floor)) {
        kept.push_back({static_cast<int32_t>(i), logits[i], weight});
      }
    }
  }
  return kept;
}

// The nucleus of the whole vocabulary, most likely first: one pass for the weight mass per
// bucket, one to gather the buckets the nucleus reaches, a sort of those alone.
std::vector<KeptToken> Nucleus(std::span<const float> logits, float max_logit, float inv_t, float top_p) {
  double mass[kNumHistograms][kNumBuckets] = {};
  float weights[kBlock];
  for (size_t begin = 0; begin < logits.size(); begin += kBlock) {
    const size_t size = std::min(kBlock, logits.size() - begin);
    ComputeWeights(logits.subspan(begin, size), max_logit, inv_t, weights);
    for (size_t j = 0; j < size; ++j) mass[j % kNumHistograms][BucketOf(weights[j])] += weights[j];
  }
  double bucket_mass[kNumBuckets];
  double total = 0.0;
  for (size_t b = 0; b < kNumBuckets; ++b) {
    bucket_mass[b] = 0.0;
    for (size_t h = 0; h < kNumHistograms; ++h) bucket_mass[b] += mass[h][b];
    total += bucket_mass[b];
  }
  const double target = top_p * total;
  size_t last_bucket = kNumBuckets - 1;
  double cumulative = 0.0;
  for (size_t b = 0; b + 1 < kNumBuckets; ++b) {
    cumulative += bucket_mass[b];
    if (cumulative >= target + kNucleusMargin * total) {
      last_bucket = b;
      break;
    }
  }
  // bucket <= last_bucket  <=>  weight > floor.
  const float floor =
      last_bucket + 1 < kNumBuckets
          ? std::bit_cast<float>(kOneBits - (static_cast<uint32_t>(last_bucket + 1) << kBucketShift))
          : 0.0f;
  std::vector<KeptToken> kept = GatherAbove(logits, max_logit, inv_t, floor, /*inclusive=*/false);
  std::sort(kept.begin(), kept.end(), MoreLikely);
  KeepNucleusPrefix(kept, target);
  return kept;
}

// Drops the candidates below the k-th largest logit; returns that logit.
float PruneToTopK(std::vector<KeptToken>& kept, size_t k) {
  const auto by_logit = [](const KeptToken& a, const KeptToken& b) { return a.logit > b.logit; };
  std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(k - 1), kept.end(), by_logit);
  const float kth = kept[k - 1].logit;
  std::erase_if(kept, [kth](const KeptToken& c) { return c.logit < kth; });
  return kth;
}

}  // namespace

bool HasTruncation(const SamplingParams& params, size_t vocab_size) {
  const bool has_top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab_size;
  return has_top_k || params.top_p < 1.0f || params.min_p > 0.0f;
}

std::vector<KeptToken> TopKByLogit(std::span<const float> logits, size_t k) {
  // The buffer holds up to twice k (at least 256) candidates at or above the threshold, which
  // rises to the k-th largest seen whenever the buffer fills: O(vocab) compares, few copies.
  size_t capacity = std::max<size_t>(2 * k, 256);
  std::vector<KeptToken> kept;
  kept.reserve(capacity);
  // -inf (probability 0) is never kept: a row with many masked tokens would otherwise tie them
  // all at the k-th place and make every prune a no-op.
  float threshold = std::numeric_limits<float>::lowest();
  for (size_t begin = 0; begin < logits.size(); begin += kChunk) {
    const size_t end = std::min(logits.size(), begin + kChunk);
    if (!(MaxLogit(logits.subspan(begin, end - begin)) >= threshold)) continue;
    for (size_t i = begin; i < end; ++i) {
      if (!(logits[i] >= threshold)) continue;
      kept.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
      if (kept.size() < capacity) continue;
      threshold = PruneToTopK(kept, k);
      // Many ties with the k-th value: grow rather than prune the same entries again and again.
      if (2 * kept.size() > capacity) {
        capacity *= 2;
        kept.reserve(capacity);
      }
    }
  }
  if (kept.size() > k) PruneToTopK(kept, k);
  return kept;
}

std::vector<KeptToken> TruncateDistribution(std::span<const float> logits, float inv_temperature,
                                            const SamplingParams& params) {
  const bool has_top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < logits.size();
  const bool has_top_p = params.top_p < 1.0f;
  // Capping an unvalidated min_p at 1 keeps the maximum (weight exactly 1) in every case.
  const float min_p = std::min(params.min_p, 1.0f);
  std::vector<KeptToken> kept;
  if (has_top_k) {
    // The row maximum is the largest kept logit: no separate pass over the row.
    kept = TopKByLogit(logits, static_cast<size_t>(params.top_k));
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const KeptToken& c : kept) max_logit = std::max(max_logit, c.logit);
    for (KeptToken& c : kept) c.weight = TemperatureWeight(c.logit, max_logit, inv_temperature);
    if (has_top_p) {
      std::sort(kept.begin(), kept.end(), MoreLikely);
      double total = 0.0;
      for (const KeptToken& c : kept) total += c.weight;
      KeepNucleusPrefix(kept, params.top_p * total);
    }
  } else if (has_top_p) {
    kept = Nucleus(logits, MaxLogit(logits), inv_temperature, params.top_p);
  } else {
    kept = GatherAbove(logits, MaxLogit(logits), inv_temperature, min_p, /*inclusive=*/true);
  }
  // The maximum has weight exactly 1, so p / p_max is the weight itself.
  if (min_p > 0.0f) std::erase_if(kept, [min_p](const KeptToken& c) { return c.weight < min_p; });
  std::sort(kept.begin(), kept.end(), [](const KeptToken& a, const KeptToken& b) { return a.token < b.token; });
  return kept;
}

}  // namespace peregrine
