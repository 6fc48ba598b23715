// Prometheus metrics with vLLM's names, meanings and histogram buckets under the `peregrine:`
// prefix (so vLLM Grafana dashboards work after a prefix rename), labelled with model_name.
//
// Thread-safety: every Observe/Add is lock-free (relaxed atomics) and may run on any thread;
// Render reads a consistent-enough snapshot (each series individually atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_client.h"

namespace peregrine::server {

class Histogram {
 public:
  explicit Histogram(std::span<const double> upper_bounds);
  void Observe(double value);
  // Appends _bucket (cumulative, with +Inf), _sum and _count lines.
  void Render(std::string_view name, std::string_view help, std::string_view labels,
              std::string& out) const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, last one is +Inf
  std::atomic<double> sum_{0.0};
};

// Cumulative token counts (for the periodic stats line).
struct ServerCounters {
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
};

// How a request ended, as vLLM's request_success_total{finished_reason} counts it.
enum class RequestOutcome : uint8_t { kStop, kLength, kAbort, kError };

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void AddPromptTokens(int64_t n) { prompt_tokens_.fetch_add(n, std::memory_order_relaxed); }
  void AddGenerationTokens(int64_t n) {
    generation_tokens_.fetch_add(n, std::memory_order_relaxed);
  }
  void AddOutcome(RequestOutcome outcome);
  void AddConnection(int delta) { num_connections_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t num_connections() const { return num_connections_.load(std::memory_order_relaxed); }
  ServerCounters counters() const {
    return {prompt_tokens_.load(std::memory_order_relaxed), generation_tokens_.load(std::memory_order_relaxed)};
  }

  Histogram& time_to_first_token() { return ttft_; }
  Histogram& inter_token_latency() { return itl_; }
  Histogram& time_per_output_token() { return tpot_; }
  Histogram& e2e_request_latency() { return e2e_; }
  Histogram& request_queue_time() { return queue_; }

  // The whole exposition (text format 0.0.4); gauges and engine counters come from `stats`.
  std::string Render(const EngineStats& stats) const;

 private:
  std::string labels_;  // model_name="..." (escaped)
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> generation_tokens_{0};
  std::atomic<int64_t> outcomes_[4] = {};
  std::atomic<int64_t> num_connections_{0};
  Histogram ttft_;
  Histogram itl_;
  Histogram tpot_;
  Histogram e2e_;
  Histogram queue_;
};

}  // namespace peregrine::server
