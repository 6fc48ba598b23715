#include "bench_client/report.h"

#include "bench_client/exposition_scan.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

namespace peregrine::bench_client {

namespace {

using Json = nlohmann::ordered_json;

const char* ModeName(RunMode mode) {
  switch (mode) {
    case RunMode::kConcurrency: return "concurrency";
    case RunMode::kRate: return "rate";
    case RunMode::kOverhead: return "overhead";
  }
  return "unknown";
}

std::string Printf(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

std::string ShapeText(const LoadShape& shape) {
  if (const auto* closed = std::get_if<ClosedLoop>(&shape)) return Printf("concurrency %d", closed->concurrency);
  const auto& open = std::get<OpenLoop>(shape);
  std::string text = std::isinf(open.request_rate) ? "rate inf" : Printf("rate %.3g req/s", open.request_rate);
  if (open.max_concurrency > 0) text += Printf(", max concurrency %d", open.max_concurrency);
  return text;
}

std::string Row(const char* name, const Distribution& d) {
  if (d.num_samples == 0) return Printf("%-8s %10s %10s %10s %10s\n", name, "-", "-", "-", "-");
  return Printf("%-8s %10.2f %10.2f %10.2f %10.2f\n", name, d.mean, d.p50, d.p90, d.p99);
}

void AddDistribution(Json& j, const char* name, const Distribution& d) {
  const bool has = d.num_samples > 0;
  j[std::string("mean_") + name + "_ms"] = has ? Json(d.mean) : Json(nullptr);
  j[std::string("median_") + name + "_ms"] = has ? Json(d.p50) : Json(nullptr);
  j[std::string("p90_") + name + "_ms"] = has ? Json(d.p90) : Json(nullptr);
  j[std::string("p99_") + name + "_ms"] = has ? Json(d.p99) : Json(nullptr);
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::optional<SpecDecodeDelta> ParseSpecDecodeCounters(std::string_view text) {
  SpecDecodeDelta d;
  bool found = false;
  ForEachSample(text, [&](std::string_view name, double v) {
    double* into = nullptr;
    if (name.ends_with("spec_decode_num_drafts_total")) into = &d.num_drafts;
    else if (name.ends_with("spec_decode_num_draft_tokens_total")) into = &d.num_draft_tokens;
    else if (name.ends_with("spec_decode_num_accepted_tokens_total")) into = &d.num_accepted_tokens;
    if (into == nullptr) return;
    *into += v;
    found = true;
  });
  if (!found) return std::nullopt;
  return d;
}

std::string FormatRunTable(const BenchConfig& config, const RunReport& r) {
  const RunMetrics& m = r.metrics;
  const WorkloadOptions& w = config.workload;
  std::string t = Printf("==== %s: %s | %d prompts, input %d, output %d, range %.2f ====\n", ModeName(r.mode),
                         ShapeText(r.shape).c_str(), w.num_prompts, w.input_len,
                         r.mode == RunMode::kOverhead ? 1 : w.output_len, w.range_ratio);
  t += Printf("%-30s %lld / %lld\n", "completed / failed", static_cast<long long>(m.num_completed),
              static_cast<long long>(m.num_failed));
  t += Printf("%-30s %.3f\n", "duration (s)", m.duration_s);
  t += Printf("%-30s %d\n", "peak requests in flight", r.max_in_flight);
  t += Printf("%-30s %lld%s\n", "input tokens", static_cast<long long>(m.total_input_tokens),
              m.is_input_estimated ? " (words; no usage from the server)" : "");
  t += Printf("%-30s %lld\n", "output tokens", static_cast<long long>(m.total_output_tokens));
  t += Printf("%-30s %.3f\n", "request throughput (req/s)", m.request_throughput);
  t += Printf("%-30s %.1f\n", "output throughput (tok/s)", m.output_throughput);
  t += Printf("%-30s %.1f\n", "total throughput (tok/s)", m.total_token_throughput);
  t += Printf("%-30s %.3f\n", "output tokens per chunk", m.mean_tokens_per_chunk);
  if (r.spec.has_value()) {
    t += Printf("%-30s %.3f\n", "mean accept length", r.spec->mean_accept_length());
    t += Printf("%-30s %.3f\n", "draft acceptance rate", r.spec->acceptance_rate());
  }
  t += Printf("%-8s %10s %10s %10s %10s\n", "(ms)", "mean", "p50", "p90", "p99");
  t += Row("TTFT", m.ttft_ms);
  t += Row("TPOT", m.tpot_ms);
  t += Row("ITL", m.itl_ms);
  t += Row("E2E", m.e2el_ms);
  if (r.mode == RunMode::kOverhead && m.e2el_ms.num_samples > 0) {
    t += Printf("%-30s p50 %.3f ms, p99 %.3f ms\n", "request overhead", m.e2el_ms.p50, m.e2el_ms.p99);
  }
  for (const ErrorCount& e : m.errors) {
    t += Printf("error x%lld: %.300s\n", static_cast<long long>(e.num_requests), e.error.c_str());
  }
  return t;
}

std::string FormatRunJson(const BenchConfig& config, const RunReport& r) {
  const RunMetrics& m = r.metrics;
  Json j;
  j["date"] = UtcNow();
  j["mode"] = ModeName(r.mode);
  j["base_url"] = config.base_url;
  j["endpoint"] = config.endpoint;
  j["model"] = r.model;
  if (const auto* closed = std::get_if<ClosedLoop>(&r.shape)) {
    j["concurrency"] = closed->concurrency;
    j["request_rate"] = nullptr;
  } else {
    const auto& open = std::get<OpenLoop>(r.shape);
    j["concurrency"] = nullptr;
    j["request_rate"] = std::isinf(open.request_rate) ? Json("inf") : Json(open.request_rate);
    j["max_concurrency"] = open.max_concurrency;
  }
  j["num_prompts"] = config.workload.num_prompts;
  j["input_len"] = config.workload.input_len;
  j["output_len"] = r.mode == RunMode::kOverhead ? 1 : config.workload.output_len;
  j["range_ratio"] = config.workload.range_ratio;
  j["seed"] = config.workload.seed;
  j["ignore_eos"] = config.ignore_eos;
  if (!config.extra_body.empty()) j["extra_body"] = Json::parse(config.extra_body, nullptr, false);
  j["duration_s"] = m.duration_s;
  j["completed"] = m.num_completed;
  j["failed"] = m.num_failed;
  j["max_in_flight"] = r.max_in_flight;
  j["total_input_tokens"] = m.total_input_tokens;
  j["input_tokens_estimated"] = m.is_input_estimated;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["mean_tokens_per_chunk"] = m.mean_tokens_per_chunk;
  if (r.spec.has_value()) {
    j["spec_num_drafts"] = r.spec->num_drafts;
    j["spec_num_draft_tokens"] = r.spec->num_draft_tokens;
    j["spec_num_accepted_tokens"] = r.spec->num_accepted_tokens;
    j["mean_accept_length"] = r.spec->mean_accept_length();
    j["draft_acceptance_rate"] = r.spec->acceptance_rate();
  } else {
    j["mean_accept_length"] = nullptr;
  }
  AddDistribution(j, "ttft", m.ttft_ms);
  AddDistribution(j, "tpot", m.tpot_ms);
  AddDistribution(j, "itl", m.itl_ms);
  AddDistribution(j, "e2el", m.e2el_ms);
  if (r.mode == RunMode::kOverhead) {
    const bool has = m.e2el_ms.num_samples > 0;
    j["request_overhead_p50_ms"] = has ? Json(m.e2el_ms.p50) : Json(nullptr);
    j["request_overhead_p99_ms"] = has ? Json(m.e2el_ms.p99) : Json(nullptr);
  }
  Json errors = Json::array();
  for (const ErrorCount& e : m.errors) errors.push_back({{"error", e.error}, {"count", e.num_requests}});
  j["errors"] = std::move(errors);
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Status AppendLine(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return Unavailable("cannot open " + path + " for appending");
  const bool is_written = std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fputc('\n', f) != EOF;
  const bool is_closed = std::fclose(f) == 0;
  if (!is_written || !is_closed) return Unavailable("cannot write " + path);
  return Status::Ok();
}

}  // namespace peregrine::bench_client
