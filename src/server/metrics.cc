#include "server/metrics.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "server/exposition.h"

namespace peregrine::server {
namespace {

// vLLM's bucket boundaries (v1 metrics loggers).
std::vector<double> TtftBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> TokenLatencyBounds() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> RequestLatencyBounds() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> ParamsNBounds() { return {1, 2, 5, 10, 20}; }

std::string_view PrefixOf(MetricsNaming naming) {
  switch (naming) {
    case MetricsNaming::kPeregrine:
      return "peregrine";
    case MetricsNaming::kVllm:
      return "vllm";
  }
  return "peregrine";
}

// vLLM labels every series with the model and the engine (data-parallel) index; one engine
// here, so always "0".
std::string CommonLabels(const MetricsOptions& o) {
  std::string labels = Label("model_name", o.model_name);
  if (o.naming == MetricsNaming::kVllm) labels.append(",").append(Label("engine", "0"));
  return labels;
}

void RenderHistogram(ExpositionWriter& w, std::string_view name, std::string_view help, const Histogram& h) {
  const std::vector<uint64_t> counts = h.counts();
  w.HistogramSeries(name, help, h.upper_bounds(), counts, h.sum());
}

}  // namespace

ServerMetrics::ServerMetrics(const MetricsOptions& options)
    : options_(options),
      kv_transfer_(TtftBounds()),
      ttft_(TtftBounds()),
      itl_(TokenLatencyBounds()),
      tpot_(TokenLatencyBounds()),
      request_tpot_(TokenLatencyBounds()),
      e2e_(RequestLatencyBounds()),
      queue_(RequestLatencyBounds()),
      prefill_(RequestLatencyBounds()),
      decode_(RequestLatencyBounds()),
      inference_(RequestLatencyBounds()),
      prompt_tokens_hist_(OneTwoFiveBounds(options.max_model_len)),
      generation_tokens_hist_(OneTwoFiveBounds(options.max_model_len)),
      max_tokens_(OneTwoFiveBounds(options.max_model_len)),
      params_n_(ParamsNBounds()),
      max_generation_tokens_(OneTwoFiveBounds(options.max_model_len)) {}

void ServerMetrics::ObserveTokenGap(double gap_s) {
  itl_.Observe(gap_s);
  tpot_.Observe(gap_s);
}

void ServerMetrics::ObserveFinished(const FinishedRequest& r) {
  outcomes_[static_cast<int>(r.outcome)].fetch_add(1, std::memory_order_relaxed);
  e2e_.Observe(r.e2e_s);
  prompt_tokens_hist_.Observe(static_cast<double>(r.num_prompt_tokens));
  generation_tokens_hist_.Observe(static_cast<double>(r.num_generation_tokens));
  if (r.max_tokens > 0) max_tokens_.Observe(static_cast<double>(r.max_tokens));
  if (r.queue_s) queue_.Observe(*r.queue_s);
  if (r.prefill_s) prefill_.Observe(*r.prefill_s);
  if (r.decode_s) {
    decode_.Observe(*r.decode_s);
    if (r.num_generation_tokens > 1) {
      request_tpot_.Observe(*r.decode_s / static_cast<double>(r.num_generation_tokens - 1));
    }
  }
  if (r.inference_s) inference_.Observe(*r.inference_s);
}

void ServerMetrics::ObservePromptGroup(int64_t n, int64_t max_generation_tokens) {
  params_n_.Observe(static_cast<double>(n));
  max_generation_tokens_.Observe(static_cast<double>(max_generation_tokens));
}

std::string ServerMetrics::Render(const EngineStats& stats) const {
  ExpositionWriter w(PrefixOf(options_.naming), CommonLabels(options_));
  auto load = [](const std::atomic<int64_t>& v) { return static_cast<double>(v.load(std::memory_order_relaxed)); };
  auto count = [](int64_t v) { return static_cast<double>(v); };

  w.Gauge("num_requests_running", "Number of requests in model execution batches.", count(stats.num_running));
  w.Gauge("num_requests_waiting", "Number of requests waiting to be processed.", count(stats.num_waiting));
  w.Gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", stats.kv_usage);
  w.Gauge("gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (same as kv_cache_usage_perc).",
          stats.kv_usage);
  w.Gauge("kv_cache_capacity_tokens", "Tokens that fit in the KV cache at the configured context length.",
          count(stats.kv_capacity_tokens));
  w.Gauge("kv_cache_pool_bytes",
          "Bytes of the KV pools (blocks, per-request state and prefix-cache snapshots) on the device.",
          count(stats.kv_pool_bytes));
  w.Family("cache_config_info", "Information of the KV cache configuration.", "gauge");
  w.Sample("cache_config_info",
           Label("block_size", std::to_string(stats.kv_block_tokens)) + "," + Label("cache_dtype", stats.kv_cache_dtype) +
               "," +
               Label("enable_prefix_caching", stats.kv_num_snapshots > 0 ? "True" : "False") + "," +
               Label("num_gpu_blocks", std::to_string(stats.kv_num_blocks)) + "," +
               Label("num_snapshots", std::to_string(stats.kv_num_snapshots)),
           1.0);
  w.Gauge("num_connections", "Open HTTP connections.", count(num_connections()));

  w.Counter("prompt_tokens_total", "Number of prefill tokens processed.", load(prompt_tokens_));
  w.Counter("generation_tokens_total", "Number of generation tokens processed.", load(generation_tokens_));
  w.Counter("num_preemptions_total", "Cumulative number of preemptions.", count(stats.num_preemptions));
  w.Counter("prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
            count(stats.prefix_cache_queries));
  w.Counter("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            count(stats.prefix_cache_hits));
  w.Counter("device_busy_seconds_total", "Device time of engine steps, in seconds.", stats.device_busy_seconds);
  w.Counter("device_idle_seconds_total",
            "Device idle time between consecutive engine steps while requests were running, in seconds.",
            stats.device_idle_seconds);
  w.Counter("device_draft_seconds_total",
            "Device time of speculative decoding between engine steps (committing accepted drafts, running the "
            "drafter), in seconds.",
            stats.device_draft_seconds);
  w.Family("runner_host_seconds_total",
           "Host time inside the model runner, by phase: launch (planning and enqueueing a step), collect (reading "
           "a finished step, acceptance), draft (running the drafter and waiting for its tokens), in seconds.",
           "counter");
  w.Sample("runner_host_seconds_total", Label("phase", "launch"), stats.runner_launch_seconds);
  w.Sample("runner_host_seconds_total", Label("phase", "collect"), stats.runner_collect_seconds);
  w.Sample("runner_host_seconds_total", Label("phase", "draft"), stats.runner_draft_seconds);
  if (stats.spec_lookahead > 0) {
    // Speculative decoding (vLLM's spec_decode counters), only when the engine speculates.
    w.Counter("spec_decode_num_drafts_total", "Number of spec decoding drafts.", count(stats.spec_num_drafts));
    w.Counter("spec_decode_num_draft_tokens_total", "Number of draft tokens.", count(stats.spec_num_draft_tokens));
    w.Counter("spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
              count(stats.spec_num_accepted_tokens));
    w.Family("spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.", "counter");
    for (size_t k = 0; k < stats.spec_accepted_per_position.size(); ++k)
      w.Sample("spec_decode_num_accepted_tokens_per_pos_total", Label("position", std::to_string(k)),
               count(stats.spec_accepted_per_position[k]));
  }
  if (options_.disaggregation) {
    // Prefill/decode disaggregation (one side's series are zero on the other side).
    w.Counter("kv_transfer_rooms_published_total", "Requests whose KV a prefill server published for a decode server.",
              load(kv_published_));
    w.Family("kv_transfer_pulls_total", "KV pulls of a decode server from prefill servers, by outcome.", "counter");
    w.Sample("kv_transfer_pulls_total", Label("outcome", "ok"), load(kv_pulls_[1]));
    w.Sample("kv_transfer_pulls_total", Label("outcome", "failed"), load(kv_pulls_[0]));
    w.Counter("kv_transfer_bytes_total", "Bytes of KV pages a decode server received.", load(kv_bytes_));
    w.Counter("kv_transfer_recomputed_total",
              "Requests whose KV transfer failed, or whose transferred KV did not load, and whose prompt was "
              "computed here.",
              load(kv_recomputed_) + count(stats.kv_imports_recomputed));
    RenderHistogram(w, "kv_transfer_seconds",
                    "Histogram of a decode request's wait for its KV (the prefill's compute and the transfer).",
                    kv_transfer_);
  }
  w.Family("request_success_total", "Count of successfully processed requests.", "counter");
  static constexpr std::string_view kReasons[] = {"stop", "length", "abort", "error"};
  for (int i = 0; i < 4; ++i) {
    w.Sample("request_success_total", Label("finished_reason", kReasons[i]), load(outcomes_[i]));
  }

  std::vector<double> step_bounds(std::begin(kStepTokenBounds), std::end(kStepTokenBounds));
  std::vector<uint64_t> step_counts(stats.step_tokens.buckets.size());
  std::transform(stats.step_tokens.buckets.begin(), stats.step_tokens.buckets.end(), step_counts.begin(),
                 [](int64_t c) { return static_cast<uint64_t>(std::max<int64_t>(c, 0)); });
  w.HistogramSeries("iteration_tokens_total", "Histogram of number of tokens per engine_step.", step_bounds, step_counts,
              static_cast<double>(stats.step_tokens.sum));

  RenderHistogram(w, "time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_);
  RenderHistogram(w, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
  RenderHistogram(w, "time_per_output_token_seconds",
                  "Histogram of time per output token in seconds (same as inter_token_latency).", tpot_);
  RenderHistogram(w, "request_time_per_output_token_seconds",
                  "Histogram of time_per_output_token_seconds per request (decode time over its tokens after the first).",
                  request_tpot_);
  RenderHistogram(w, "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e_);
  RenderHistogram(w, "request_queue_time_seconds",
                  "Histogram of time spent in WAITING phase for request (queued until first scheduled).", queue_);
  RenderHistogram(w, "request_inference_time_seconds",
                  "Histogram of time spent in RUNNING phase for request (first scheduled until the last token).", inference_);
  RenderHistogram(w, "request_prefill_time_seconds",
                  "Histogram of time spent in PREFILL phase for request (first scheduled until the first token).", prefill_);
  RenderHistogram(w, "request_decode_time_seconds",
                  "Histogram of time spent in DECODE phase for request (first until last token).", decode_);
  RenderHistogram(w, "request_prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_hist_);
  RenderHistogram(w, "request_generation_tokens", "Number of generation tokens processed.", generation_tokens_hist_);
  RenderHistogram(w, "request_params_max_tokens", "Histogram of the max_tokens request parameter.", max_tokens_);
  RenderHistogram(w, "request_params_n", "Histogram of the n request parameter.", params_n_);
  RenderHistogram(w, "request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
                  max_generation_tokens_);
  return w.Take();
}

void ServerMetrics::ObserveKvTransfer(bool ok, uint64_t bytes, double seconds) {
  kv_pulls_[ok ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
  if (!ok) return;
  kv_bytes_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  kv_transfer_.Observe(seconds);
}

}  // namespace peregrine::server
