// How a run is shown: a table for people and a JSON line for the results file.
#pragma once

#include <optional>
#include <string>
#include <string_view>

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

// The server's speculative-decoding counters over a run (its /metrics: vLLM's spec_decode
// counters, under any prefix), when it exports them.
struct SpecDecodeDelta {
  double num_drafts = 0;
  double num_draft_tokens = 0;
  double num_accepted_tokens = 0;
  // Tokens per verify step of a request: 1 + accepted drafts per draft (SGLang's accept length).
  double mean_accept_length() const { return num_drafts > 0 ? 1.0 + num_accepted_tokens / num_drafts : 0.0; }
  double acceptance_rate() const { return num_draft_tokens > 0 ? num_accepted_tokens / num_draft_tokens : 0.0; }
};

// Sums of the spec_decode counters in a Prometheus exposition (any metric prefix); nullopt
// when it has none.
std::optional<SpecDecodeDelta> ParseSpecDecodeCounters(std::string_view exposition);

struct RunReport {
  RunMode mode = RunMode::kConcurrency;
  LoadShape shape;
  std::string model;  // as sent
  int max_in_flight = 0;
  RunMetrics metrics;
  std::optional<SpecDecodeDelta> spec;  // the run's counter increments (servers that speculate)
};

// A multi-line table ending in '\n'.
std::string FormatRunTable(const BenchConfig& config, const RunReport& report);

// One JSON object without a newline. Metric names follow vLLM's benchmark_serving
// (mean_ttft_ms, median_ttft_ms, p99_ttft_ms, ...); a distribution without samples is null.
std::string FormatRunJson(const BenchConfig& config, const RunReport& report);

// Appends `line` and a newline to the file at `path`, creating it. kUnavailable on I/O errors.
Status AppendLine(const std::string& path, const std::string& line);

}  // namespace peregrine::bench_client
