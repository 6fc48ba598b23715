// The figures of one benchmark run, computed from its request records.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench_client/percentile.h"
#include "bench_client/request_record.h"
#include "bench_client/workload.h"

namespace peregrine::bench_client {

struct ErrorCount {
  std::string error;
  int64_t num_requests = 0;  // requests that failed this way
};

struct RunMetrics {
  double duration_s = 0;
  int64_t num_completed = 0;
  int64_t num_failed = 0;
  int64_t total_input_tokens = 0;   // completed requests; usage when sent, else words planned
  int64_t total_output_tokens = 0;  // completed requests
  bool is_input_estimated = false;  // some input count is a planned word count, not usage
  double request_throughput = 0;    // completed requests per second
  double output_throughput = 0;     // output tokens per second
  double total_token_throughput = 0;
  // Output tokens per chunk that carried output: 1 when a server streams every token alone,
  // above 1 when chunks carry several (e.g. accepted speculative tokens of one step).
  double mean_tokens_per_chunk = 0;
  Distribution ttft_ms;  // send → first output chunk
  Distribution tpot_ms;  // per request (e2e − ttft) / (output tokens − 1), requests with ≥ 2 tokens
  Distribution itl_ms;   // gaps between neighbouring output chunks, all requests pooled
  Distribution e2el_ms;  // send → end
  std::vector<ErrorCount> errors;  // distinct failure reasons, most frequent first, at most 5
};

// `prompts[i]` is what `records[i]` asked for; latency figures use completed requests only.
// `duration_s` is the wall time of the run (throughputs are 0 when it is not positive).
RunMetrics ComputeRunMetrics(std::span<const RequestRecord> records, std::span<const PromptSpec> prompts,
                             double duration_s);

}  // namespace peregrine::bench_client
