#include "bench_client/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench_client/request_body.h"
#include "bench_client/stream_client.h"

namespace peregrine::bench_client {

namespace {

// Warm-up prompts come from a seed no run uses, so they warm the server without caching a
// measured prompt.
constexpr uint64_t kWarmupSeedOffset = 0x9e3779b97f4a7c15ULL;
constexpr int kMaxWarmupTokens = 16;

Result<std::string> FirstModelId(StreamClient& client, const std::string& prefix) {
  PG_ASSIGN_OR_RETURN(std::string body, client.Get(prefix + "/v1/models"));
  const auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    auto data = json.find("data");
    if (data != json.end() && data->is_array() && !data->empty() && data->front().is_object()) {
      auto id = data->front().find("id");
      if (id != data->front().end() && id->is_string()) return id->get<std::string>();
    }
  }
  return Unavailable("the server lists no model at " + prefix + "/v1/models; pass --model");
}

struct PlannedRun {
  RunMode mode;
  LoadShape shape;
};

std::vector<PlannedRun> PlanRuns(const BenchConfig& config) {
  std::vector<PlannedRun> runs;
  for (double rate : config.request_rates) {
    runs.push_back({config.is_server_overhead ? RunMode::kOverhead : RunMode::kRate,
                    OpenLoop{rate, config.max_concurrency, config.workload.seed}});
  }
  std::vector<int> levels = config.concurrencies;
  if (levels.empty() && runs.empty()) levels.push_back(1);
  for (int c : levels) {
    runs.push_back({config.is_server_overhead ? RunMode::kOverhead : RunMode::kConcurrency, ClosedLoop{c}});
  }
  return runs;
}

// Every stream holds a socket: raise the soft open-file limit toward the hard one when a run
// needs more than it allows. Process-wide, so done once here at the edge.
void EnsureFileLimit(const BenchConfig& config, const std::vector<PlannedRun>& runs, std::FILE* out) {
  int64_t num_streams = 0;
  for (const PlannedRun& run : runs) {
    int64_t n = config.workload.num_prompts;
    if (const auto* closed = std::get_if<ClosedLoop>(&run.shape)) n = std::min<int64_t>(n, closed->concurrency);
    const auto* open = std::get_if<OpenLoop>(&run.shape);
    if (open != nullptr && open->max_concurrency > 0) n = std::min<int64_t>(n, open->max_concurrency);
    num_streams = std::max(num_streams, n);
  }
  constexpr int64_t kSpareFiles = 64;
  const auto wanted = static_cast<rlim_t>(num_streams + kSpareFiles);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(wanted, limit.rlim_max);
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < wanted) {
    std::fprintf(out, "warning: the open-file limit (%llu) is below the %lld streams asked for\n",
                 static_cast<unsigned long long>(limit.rlim_cur), static_cast<long long>(num_streams));
  }
}

// The prompts of one run and the requests that carry them.
struct RunInput {
  std::vector<PromptSpec> prompts;
  std::vector<StreamRequest> requests;
};

Result<RunInput> MakeRunInput(const BenchConfig& config, const std::string& model, WorkloadOptions workload,
                              int max_output_len) {
  RunInput input;
  PG_ASSIGN_OR_RETURN(input.prompts, MakeRandomWorkload(workload));
  const ApiKind kind = ApiKindForEndpoint(config.endpoint);
  const std::string target = ParseBaseUrl(config.base_url)->path_prefix + config.endpoint;
  for (PromptSpec& p : input.prompts) {
    p.output_len = std::min(p.output_len, max_output_len);
    input.requests.push_back({target, BuildRequestBody(kind, model, p, config.ignore_eos, config.extra_body)});
  }
  return input;
}

Status WarmUp(const BenchConfig& config, const std::string& model, StreamClient& client, std::FILE* out) {
  if (config.num_warmups == 0) return Status::Ok();
  WorkloadOptions workload = config.workload;
  workload.num_prompts = config.num_warmups;
  workload.seed += kWarmupSeedOffset;
  const int max_tokens = config.is_server_overhead ? 1 : kMaxWarmupTokens;
  PG_ASSIGN_OR_RETURN(RunInput input, MakeRunInput(config, model, workload, max_tokens));
  std::fprintf(out, "warm-up: %d request(s)\n", config.num_warmups);
  std::fflush(out);
  PG_ASSIGN_OR_RETURN(RunResult result, RunLoad(client, input.requests, ClosedLoop{config.num_warmups}));
  const auto num_succeeded = std::count_if(result.records.begin(), result.records.end(),
                                [](const RequestRecord& r) { return r.is_success; });
  if (num_succeeded == 0) return Unavailable("every warm-up request failed; first error: " + result.records.front().error);
  return Status::Ok();
}

// The server's spec_decode counters now (nullopt: no /metrics, or it does not speculate).
std::optional<SpecDecodeDelta> ScrapeSpecDecode(StreamClient& client, const std::string& prefix) {
  Result<std::string> body = client.Get(prefix + "/metrics");
  if (!body.ok()) return std::nullopt;
  return ParseSpecDecodeCounters(*body);
}

}  // namespace

Result<std::vector<RunReport>> RunBench(const BenchConfig& config, std::FILE* out) {
  PG_RETURN_IF_ERROR(ValidateBenchConfig(config));
  PG_ASSIGN_OR_RETURN(BaseUrl url, ParseBaseUrl(config.base_url));
  ClientOptions options{url, config.api_key, config.num_client_threads, config.request_timeout_s};
  PG_ASSIGN_OR_RETURN(std::unique_ptr<StreamClient> client, StreamClient::Create(options));
  std::string model = config.model;
  if (model.empty()) {
    PG_ASSIGN_OR_RETURN(model, FirstModelId(*client, url.path_prefix));
  }
  std::fprintf(out, "server %s%s, model %s\n", config.base_url.c_str(), config.endpoint.c_str(), model.c_str());
  PG_RETURN_IF_ERROR(WarmUp(config, model, *client, out));

  std::vector<RunReport> reports;
  const std::vector<PlannedRun> runs = PlanRuns(config);
  EnsureFileLimit(config, runs, out);
  for (size_t i = 0; i < runs.size(); ++i) {
    WorkloadOptions workload = config.workload;
    workload.seed += i;
    const int max_output_len = config.is_server_overhead ? 1 : std::numeric_limits<int>::max();
    PG_ASSIGN_OR_RETURN(RunInput input, MakeRunInput(config, model, workload, max_output_len));
    const std::optional<SpecDecodeDelta> spec_before = ScrapeSpecDecode(*client, url.path_prefix);
    PG_ASSIGN_OR_RETURN(RunResult result, RunLoad(*client, input.requests, runs[i].shape));
    RunReport report{runs[i].mode, runs[i].shape, model, result.max_in_flight,
                     ComputeRunMetrics(result.records, input.prompts, result.duration_s), std::nullopt};
    if (const std::optional<SpecDecodeDelta> after = ScrapeSpecDecode(*client, url.path_prefix);
        spec_before.has_value() && after.has_value()) {
      report.spec = SpecDecodeDelta{after->num_drafts - spec_before->num_drafts,
                                    after->num_draft_tokens - spec_before->num_draft_tokens,
                                    after->num_accepted_tokens - spec_before->num_accepted_tokens};
    }
    std::fputs(FormatRunTable(config, report).c_str(), out);
    std::fflush(out);
    if (!config.result_file.empty()) PG_RETURN_IF_ERROR(AppendLine(config.result_file, FormatRunJson(config, report)));
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace peregrine::bench_client
