// How a run is shown: a table for people and a JSON line for the results file.
#pragma once

#include <string>

#include "base/status.h"
#include "bench_client/bench_config.h"
#include "bench_client/load_runner.h"
#include "bench_client/run_metrics.h"

namespace peregrine::bench_client {

enum class RunMode {
  kConcurrency,  // closed loop
  kRate,         // open loop, Poisson arrivals
  kOverhead,     // max_tokens = 1 requests; e2e percentiles are the request overhead
};

struct RunReport {
  RunMode mode = RunMode::kConcurrency;
  LoadShape shape;
  std::string model;  // as sent
  int max_in_flight = 0;
  RunMetrics metrics;
};

// A multi-line table ending in '\n'.
std::string FormatRunTable(const BenchConfig& config, const RunReport& report);

// One JSON object without a newline. Metric names follow vLLM's benchmark_serving
// (mean_ttft_ms, median_ttft_ms, p99_ttft_ms, ...); a distribution without samples is null.
std::string FormatRunJson(const BenchConfig& config, const RunReport& report);

// Appends `line` and a newline to the file at `path`, creating it. kUnavailable on I/O errors.
Status AppendLine(const std::string& path, const std::string& line);

}  // namespace peregrine::bench_client
