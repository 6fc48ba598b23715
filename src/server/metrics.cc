#include "server/metrics.h"

#include <charconv>
#include <cmath>
#include <string_view>

namespace peregrine::server {
namespace {

// vLLM's bucket boundaries (v1 metrics loggers).
constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr double kTokenLatencyBuckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                           0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                           7.5,  10.0,  20.0, 40.0,  80.0};
constexpr double kRequestLatencyBuckets[] = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                             5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

void AppendNumber(double v, std::string& out) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, ec == std::errc() ? end : buf);
}

void AppendInt(int64_t v, std::string& out) { out += std::to_string(v); }

void AppendHeader(std::string_view name, std::string_view help, std::string_view type,
                  std::string& out) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

template <typename T>
void AppendSample(std::string_view name, std::string_view labels, T value, std::string& out) {
  out.append(name).append("{").append(labels).append("} ");
  if constexpr (std::is_floating_point_v<T>) {
    AppendNumber(value, out);
  } else {
    AppendInt(value, out);
  }
  out += '\n';
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::span<const double> upper_bounds)
    : upper_bounds_(upper_bounds.begin(), upper_bounds.end()),
      counts_(new std::atomic<uint64_t>[upper_bounds.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  size_t i = 0;
  while (i < upper_bounds_.size() && value > upper_bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::Render(std::string_view name, std::string_view help, std::string_view labels,
                       std::string& out) const {
  AppendHeader(name, help, "histogram", out);
  uint64_t cumulative = 0;
  const std::string bucket = std::string(name) + "_bucket";
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    out.append(bucket).append("{").append(labels).append(",le=\"");
    if (i < upper_bounds_.size()) {
      AppendNumber(upper_bounds_[i], out);
    } else {
      out += "+Inf";
    }
    out.append("\"} ");
    AppendInt(static_cast<int64_t>(cumulative), out);
    out += '\n';
  }
  AppendSample(std::string(name) + "_sum", labels, sum_.load(std::memory_order_relaxed), out);
  AppendSample(std::string(name) + "_count", labels, static_cast<int64_t>(cumulative), out);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + EscapeLabelValue(model_name) + "\""),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets) {}

void ServerMetrics::AddOutcome(RequestOutcome outcome) {
  outcomes_[static_cast<int>(outcome)].fetch_add(1, std::memory_order_relaxed);
}

std::string ServerMetrics::Render(const EngineStats& stats) const {
  std::string out;
  out.reserve(8192);
  auto gauge = [&](std::string_view name, std::string_view help, auto value) {
    AppendHeader(name, help, "gauge", out);
    AppendSample(name, labels_, value, out);
  };
  auto counter = [&](std::string_view name, std::string_view help, int64_t value) {
    AppendHeader(name, help, "counter", out);
    AppendSample(name, labels_, value, out);
  };
  gauge("peregrine:num_requests_running", "Number of requests in model execution batches.",
        stats.num_running);
  gauge("peregrine:num_requests_waiting", "Number of requests waiting to be processed.",
        stats.num_waiting);
  gauge("peregrine:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        stats.kv_usage);
  gauge("peregrine:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage (same as kv_cache_usage_perc).",
        stats.kv_usage);
  gauge("peregrine:kv_cache_capacity_tokens",
        "Tokens that fit in the KV cache at the configured context length.",
        stats.kv_capacity_tokens);
  gauge("peregrine:kv_cache_pool_bytes",
        "Bytes of the KV pools (blocks, per-request state and prefix-cache snapshots) on the device.",
        stats.kv_pool_bytes);
  AppendHeader("peregrine:cache_config_info", "Information of the KV cache configuration.", "gauge", out);
  AppendSample("peregrine:cache_config_info",
               labels_ + ",block_size=\"" + std::to_string(stats.kv_block_tokens) + "\",num_gpu_blocks=\"" +
                   std::to_string(stats.kv_num_blocks) + "\",num_snapshots=\"" +
                   std::to_string(stats.kv_num_snapshots) + "\",enable_prefix_caching=\"" +
                   (stats.kv_num_snapshots > 0 ? "True" : "False") + "\"",
               int64_t{1}, out);
  gauge("peregrine:num_connections", "Open HTTP connections.", num_connections());
  counter("peregrine:prompt_tokens_total", "Number of prefill tokens processed.",
          prompt_tokens_.load(std::memory_order_relaxed));
  counter("peregrine:generation_tokens_total", "Number of generation tokens processed.",
          generation_tokens_.load(std::memory_order_relaxed));
  counter("peregrine:num_preemptions_total", "Cumulative number of preemptions.",
          stats.num_preemptions);
  counter("peregrine:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          stats.prefix_cache_queries);
  counter("peregrine:prefix_cache_hits_total",
          "Prefix cache hits, in terms of number of cached tokens.", stats.prefix_cache_hits);
  AppendHeader("peregrine:device_busy_seconds_total", "Device time of engine steps, in seconds.", "counter", out);
  AppendSample("peregrine:device_busy_seconds_total", labels_, stats.device_busy_seconds, out);
  AppendHeader("peregrine:device_idle_seconds_total",
               "Device idle time between consecutive engine steps while requests were running, in seconds.",
               "counter", out);
  AppendSample("peregrine:device_idle_seconds_total", labels_, stats.device_idle_seconds, out);

  AppendHeader("peregrine:request_success_total", "Count of successfully processed requests.",
               "counter", out);
  static constexpr std::string_view kReasons[] = {"stop", "length", "abort", "error"};
  for (int i = 0; i < 4; ++i) {
    const std::string labels = labels_ + ",finished_reason=\"" + std::string(kReasons[i]) + "\"";
    AppendSample("peregrine:request_success_total", labels,
                 outcomes_[i].load(std::memory_order_relaxed), out);
  }

  ttft_.Render("peregrine:time_to_first_token_seconds",
               "Histogram of time to first token in seconds.", labels_, out);
  itl_.Render("peregrine:inter_token_latency_seconds",
              "Histogram of inter-token latency in seconds.", labels_, out);
  tpot_.Render("peregrine:time_per_output_token_seconds",
               "Histogram of time per output token in seconds (same as inter_token_latency).",
               labels_, out);
  e2e_.Render("peregrine:e2e_request_latency_seconds",
              "Histogram of e2e request latency in seconds.", labels_, out);
  queue_.Render("peregrine:request_queue_time_seconds",
                "Histogram of time spent in the engine before the first output, in seconds.",
                labels_, out);
  return out;
}

}  // namespace peregrine::server
