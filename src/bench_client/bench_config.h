// The typed configuration of `peregrine bench`, parsed from flags once and passed down by const&.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "bench_client/workload.h"

namespace peregrine::bench_client {

struct BenchConfig {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";  // or "/v1/chat/completions"
  std::string model;                         // "" asks the server's /v1/models for its first model
  std::string api_key;                       // "" sends no Authorization header
  WorkloadOptions workload;
  std::vector<int> concurrencies;     // closed-loop sweep; {1} when both sweeps are empty
  std::vector<double> request_rates;  // open-loop sweep, +inf allowed; excludes `concurrencies`
  int max_concurrency = 0;            // open-loop cap on requests in flight; 0 = none
  // Sends max_tokens = 1 and reports the end-to-end latency percentiles as "request overhead".
  bool is_server_overhead = false;
  bool ignore_eos = true;
  int num_warmups = 1;  // unmeasured requests before the sweep; all failing aborts the bench
  int num_client_threads = 2;
  double request_timeout_s = 600;
  std::string result_file;  // JSON lines appended, one per run; "" writes none
  std::string extra_body;   // a JSON object merged into every request body; "" adds nothing
};

// Fails with kInvalidArgument naming the first bad field.
Status ValidateBenchConfig(const BenchConfig& config);

// "inf" (any case) or a positive decimal number of requests per second.
Result<double> ParseRequestRate(std::string_view text);

}  // namespace peregrine::bench_client
