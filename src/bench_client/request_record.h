// What the client observed about one streamed request; the input of every metric.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace peregrine::bench_client {

using Clock = std::chrono::steady_clock;

struct RequestRecord {
  Clock::time_point send_time;  // before connecting (or writing, on a kept-alive connection)
  Clock::time_point end_time;   // when the response ended or the request failed
  // Arrival of each chunk that carried output, in order: [0] is the first token (TTFT), the gaps
  // between neighbours are the inter-token latencies. Chunks read in one socket read share a time.
  std::vector<Clock::time_point> token_times;
  int64_t num_output_tokens = 0;  // usage.completion_tokens when sent, else token_times.size()
  int64_t num_prompt_tokens = -1; // usage.prompt_tokens when sent, else -1
  int http_status = 0;            // 0 when no status line arrived
  bool is_success = false;        // HTTP 200, "[DONE]" seen, at least one token, no error chunk
  std::string error;              // why it failed; empty on success
};

}  // namespace peregrine::bench_client
