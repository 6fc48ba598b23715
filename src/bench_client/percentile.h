// Percentiles and the summary of a latency distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace peregrine::bench_client {

// The p-th percentile (p in [0, 100]) of ascending `sorted`, interpolating linearly between the
// two nearest ranks (rank p/100·(n−1), as numpy's default). Requires a non-empty input.
double Percentile(std::span<const double> sorted, double p);

struct Distribution {
  int64_t num_samples = 0;  // 0 leaves the other fields 0
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
};

// Sorts `samples` (hence by value) and summarises them.
Distribution Summarize(std::vector<double> samples);

}  // namespace peregrine::bench_client
