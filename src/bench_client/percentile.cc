#include "bench_client/percentile.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"

namespace peregrine::bench_client {

double Percentile(std::span<const double> sorted, double p) {
  PG_CHECK(!sorted.empty());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution Summarize(std::vector<double> samples) {
  Distribution d;
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  d.num_samples = static_cast<int64_t>(samples.size());
  d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  d.p50 = Percentile(samples, 50);
  d.p90 = Percentile(samples, 90);
  d.p99 = Percentile(samples, 99);
  return d;
}

}  // namespace peregrine::bench_client
