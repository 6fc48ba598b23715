// ServerConfig: everything the HTTP front end needs to know, parsed once at the edge (the CLI)
// and passed down by const&. Limits are the robustness rows of the design (3, 4, 7, 9, 13, 15).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace peregrine::server {

struct ServerLimits {
  size_t max_body_bytes = size_t{32} << 20;   // larger bodies get 413 before being buffered
  uint32_t max_header_bytes = 64 << 10;       // request line + all fields; beyond: 431
  uint32_t max_header_fields = 128;           // beyond: 431
  int max_connections = 10000;                // accepted and closed at once beyond this
  int max_concurrent_requests = 1024;         // generation requests in flight; beyond: 429
  int max_waiting_requests = 0;               // engine waiting queue bound checked before
                                              // rendering (0: only the engine decides)
  int max_n = 16;                             // choices per request (n, prompts x n)
  int max_stop_strings = 16;
  size_t max_stop_string_bytes = 1024;
  int max_stop_token_ids = 256;
  int max_tools = 128;
  int max_choices = 64;                       // prompts x n of one completions request
  int max_json_depth = 64;                    // nesting of the request body
  size_t max_grammar_bytes = 256 << 10;       // a structured-output schema, regex, grammar or choice list
};

struct ServerTimeouts {
  std::chrono::milliseconds idle{60'000};     // keep-alive: waiting for a request's first byte
  std::chrono::milliseconds header{10'000};   // first byte to the end of the header (slowloris)
  std::chrono::milliseconds body{60'000};     // reading the body
  std::chrono::milliseconds write{60'000};    // one write to a client that stopped reading
  std::chrono::milliseconds drain{30'000};    // Drain(): in-flight requests may finish
  std::chrono::milliseconds drain_grace{3'000};  // after aborting, time to flush error events
};

// How /metrics names its series: Peregrine's (`peregrine:` names, a model_name label) or
// vLLM's (`vllm:` names, model_name and engine labels), so that a dashboard or alert built
// for vLLM works unchanged.
enum class MetricsNaming : uint8_t { kPeregrine, kVllm };

// Prefill/decode disaggregation (SGLang's --disaggregation-mode): a prefill server computes
// the prompt of each request that names a bootstrap room and publishes its KV there; a decode
// server pulls the room's KV and generates. Requests without a room are served whole.
enum class DisaggregationMode : uint8_t { kNull, kPrefill, kDecode };
// What a decode server does when a transfer fails (the prefill server is gone, the transfer
// was lost, corrupted or expired): compute the prompt itself, or answer with an error.
enum class DisaggregationFailurePolicy : uint8_t { kRecompute, kFail };

struct DisaggregationConfig {
  DisaggregationMode mode = DisaggregationMode::kNull;
  DisaggregationFailurePolicy failure_policy = DisaggregationFailurePolicy::kRecompute;
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                       // 0: an ephemeral port (see Server::port)
  std::string api_key;                        // empty: no authentication
  std::string model_name = "deepseek-v4";     // the id in /v1/models and the metrics label
  int num_io_threads = 2;                     // connections are spread over these
  int num_worker_threads = 2;                 // JSON parsing, prompt rendering, tokenization
  bool default_thinking = false;              // thinking mode when the request does not say
  int retry_after_seconds = 1;                // Retry-After on 429 and 503
  bool log_requests = true;                   // one log line per finished request
  MetricsNaming metrics_naming = MetricsNaming::kPeregrine;
  // Absent: /metrics is served on the API port. Set: only on its own listener (same host;
  // 0 there means an ephemeral port, see Server::metrics_port).
  std::optional<uint16_t> metrics_port;
  ServerLimits limits;
  ServerTimeouts timeouts;
  DisaggregationConfig disaggregation;
};

// InvalidArgument naming the first field out of range.
Status ValidateServerConfig(const ServerConfig& config);

}  // namespace peregrine::server
