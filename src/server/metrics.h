// Prometheus metrics with vLLM's names, meanings and histogram buckets, under the `peregrine:`
// prefix with a model_name label, or exactly as vLLM names and labels them
// (MetricsNaming::kVllm), so vLLM's Grafana dashboards and alerts work unchanged.
//
// Thread-safety: every Observe/Add is lock-free (relaxed atomics) and may run on any thread;
// Render reads a consistent-enough snapshot (each series individually atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/engine_client.h"
#include "server/histogram.h"
#include "server/server_config.h"

namespace peregrine::server {

// Cumulative token counts (for the periodic stats line).
struct ServerCounters {
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
};

// How a request ended, as vLLM's request_success_total{finished_reason} counts it.
enum class RequestOutcome : uint8_t { kStop, kLength, kAbort, kError };

struct MetricsOptions {
  MetricsNaming naming = MetricsNaming::kPeregrine;
  std::string model_name;
  int64_t max_model_len = 1;  // the top bucket of the token-count histograms
  bool disaggregation = false;  // export the KV-transfer series
};

// One finished engine request (one choice), for the per-request histograms. The phases
// follow vLLM: queued -> first scheduled (queue), -> first token (prefill), -> last token
// (decode); scheduled -> last token is inference. A phase the request never reached is absent.
struct FinishedRequest {
  RequestOutcome outcome = RequestOutcome::kStop;
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;
  int64_t max_tokens = 0;  // the effective max_tokens of the engine request
  double e2e_s = 0.0;      // HTTP arrival -> finish
  std::optional<double> queue_s;
  std::optional<double> prefill_s;
  std::optional<double> decode_s;
  std::optional<double> inference_s;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(const MetricsOptions& options);

  void AddPromptTokens(int64_t n) { prompt_tokens_.fetch_add(n, std::memory_order_relaxed); }
  void AddGenerationTokens(int64_t n) {
    generation_tokens_.fetch_add(n, std::memory_order_relaxed);
  }
  void AddConnection(int delta) { num_connections_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t num_connections() const { return num_connections_.load(std::memory_order_relaxed); }
  ServerCounters counters() const {
    return {prompt_tokens_.load(std::memory_order_relaxed), generation_tokens_.load(std::memory_order_relaxed)};
  }

  void ObserveFirstToken(double ttft_s) { ttft_.Observe(ttft_s); }
  // The gap between two consecutive tokens of one request (ITL, and vLLM's older TPOT name).
  void ObserveTokenGap(double gap_s);
  void ObserveFinished(const FinishedRequest& request);
  // Per prompt of an HTTP request: its `n`, and the most tokens one of its choices generated.
  void ObservePromptGroup(int64_t n, int64_t max_generation_tokens);

  // Disaggregation: a prefill request's KV published; a decode request's pull (its bytes and
  // seconds when it succeeded); a failed pull answered by computing the prompt here.
  void AddKvPublished() { kv_published_.fetch_add(1, std::memory_order_relaxed); }
  void ObserveKvTransfer(bool ok, uint64_t bytes, double seconds);
  void AddKvRecompute() { kv_recomputed_.fetch_add(1, std::memory_order_relaxed); }
  // The whole exposition (text format 0.0.4); gauges and engine counters come from `stats`.
  std::string Render(const EngineStats& stats) const;

 private:
  const MetricsOptions options_;
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> generation_tokens_{0};
  std::atomic<int64_t> outcomes_[4] = {};
  std::atomic<int64_t> num_connections_{0};
  std::atomic<int64_t> kv_published_{0};
  std::atomic<int64_t> kv_pulls_[2] = {};  // failed, succeeded
  std::atomic<int64_t> kv_bytes_{0};
  std::atomic<int64_t> kv_recomputed_{0};
  Histogram kv_transfer_;
  Histogram ttft_;
  Histogram itl_;
  Histogram tpot_;
  Histogram request_tpot_;
  Histogram e2e_;
  Histogram queue_;
  Histogram prefill_;
  Histogram decode_;
  Histogram inference_;
  Histogram prompt_tokens_hist_;
  Histogram generation_tokens_hist_;
  Histogram max_tokens_;
  Histogram params_n_;
  Histogram max_generation_tokens_;
};

}  // namespace peregrine::server
