#include "bench_client/run_metrics.h"

#include <algorithm>
#include <map>

#include "base/check.h"

namespace peregrine::bench_client {

namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::vector<ErrorCount> TopErrors(std::span<const RequestRecord> records) {
  std::map<std::string, int64_t> counts;
  for (const RequestRecord& r : records) {
    if (!r.is_success) ++counts[r.error.empty() ? "unknown failure" : r.error];
  }
  std::vector<ErrorCount> errors;
  for (auto& [error, count] : counts) errors.push_back({error, count});
  std::stable_sort(errors.begin(), errors.end(),
                   [](const ErrorCount& a, const ErrorCount& b) { return a.num_requests > b.num_requests; });
  if (errors.size() > 5) errors.resize(5);
  return errors;
}

}  // namespace

RunMetrics ComputeRunMetrics(std::span<const RequestRecord> records, std::span<const PromptSpec> prompts,
                             double duration_s) {
  PG_CHECK(records.size() == prompts.size(), "one prompt per record");
  RunMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t num_token_chunks = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& r = records[i];
    if (!r.is_success) {
      ++m.num_failed;
      continue;
    }
    ++m.num_completed;
    if (r.num_prompt_tokens >= 0) {
      m.total_input_tokens += r.num_prompt_tokens;
    } else {
      m.total_input_tokens += prompts[i].input_len;
      m.is_input_estimated = true;
    }
    m.total_output_tokens += r.num_output_tokens;
    num_token_chunks += static_cast<int64_t>(r.token_times.size());
    const double e2e = Ms(r.end_time - r.send_time);
    e2el.push_back(e2e);
    if (r.token_times.empty()) continue;  // a success always has a token; be safe anyway
    const double first = Ms(r.token_times.front() - r.send_time);
    ttft.push_back(first);
    if (r.num_output_tokens > 1) tpot.push_back((e2e - first) / static_cast<double>(r.num_output_tokens - 1));
    for (size_t k = 1; k < r.token_times.size(); ++k) itl.push_back(Ms(r.token_times[k] - r.token_times[k - 1]));
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.num_completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
  }
  if (num_token_chunks > 0) {
    m.mean_tokens_per_chunk = static_cast<double>(m.total_output_tokens) / static_cast<double>(num_token_chunks);
  }
  m.ttft_ms = Summarize(std::move(ttft));
  m.tpot_ms = Summarize(std::move(tpot));
  m.itl_ms = Summarize(std::move(itl));
  m.e2el_ms = Summarize(std::move(e2el));
  m.errors = TopErrors(records);
  return m;
}

}  // namespace peregrine::bench_client
