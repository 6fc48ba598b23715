#include "cli/bench_command.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_client/bench.h"

namespace peregrine::cli {

namespace {

struct BenchFlags {
  bench_client::BenchConfig config;
  std::vector<std::string> request_rates;  // "inf" or a number, parsed after CLI11
  bool no_ignore_eos = false;
};

int RunBenchCommand(const BenchFlags& flags) {
  bench_client::BenchConfig config = flags.config;
  for (const std::string& text : flags.request_rates) {
    Result<double> rate = bench_client::ParseRequestRate(text);
    if (!rate.ok()) {
      std::fprintf(stderr, "error: %s\n", rate.status().ToString().c_str());
      return 2;
    }
    config.request_rates.push_back(*rate);
  }
  config.ignore_eos = !flags.no_ignore_eos;
  Result<std::vector<bench_client::RunReport>> reports = bench_client::RunBench(config, stdout);
  if (!reports.ok()) {
    std::fprintf(stderr, "error: %s\n", reports.status().ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  bench_client::BenchConfig& c = flags->config;
  CLI::App* cmd = app.add_subcommand("bench", "Serving benchmark against an OpenAI-compatible server");
  cmd->add_option("--base-url", c.base_url, "Server address, http://host:port[/prefix]")->capture_default_str();
  cmd->add_option("--endpoint", c.endpoint, "/v1/completions or /v1/chat/completions")->capture_default_str();
  cmd->add_option("--model", c.model, "Model name to send (default: the first of /v1/models)");
  cmd->add_option("--api-key", c.api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--num-prompts", c.workload.num_prompts, "Requests per run")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  cmd->add_option("--input-len", c.workload.input_len, "Prompt length in words (about one token each)")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  cmd->add_option("--output-len", c.workload.output_len, "max_tokens per request")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  cmd->add_option("--prefix-len", c.workload.prefix_len,
                  "Words of one random prefix every prompt starts with (a shared system prompt; "
                  "--input-len words follow it)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--range-ratio", c.workload.range_ratio,
                  "Lengths uniform in [len*(1-r), len*(1+r)]; 0 keeps them fixed")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  cmd->add_option("--seed", c.workload.seed, "Seed of prompts, lengths and arrivals")->capture_default_str();
  cmd->add_option("--concurrency", c.concurrencies, "Closed-loop sweep: requests in flight, e.g. 1,16,64")
      ->delimiter(',')
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("--request-rate", flags->request_rates, "Open-loop sweep: Poisson requests/s, e.g. 4,8,inf")
      ->delimiter(',');
  cmd->add_option("--max-concurrency", c.max_concurrency, "Open-loop cap on requests in flight; 0 = none")
      ->check(CLI::Range(0, 1'000'000));
  cmd->add_flag("--server-overhead", c.is_server_overhead,
                "Send max_tokens=1 and report end-to-end p50/p99 as request overhead");
  cmd->add_flag("--no-ignore-eos", flags->no_ignore_eos, "Do not send ignore_eos (stop at end-of-sequence)");
  cmd->add_option("--warmup", c.num_warmups, "Unmeasured requests before the sweep")
      ->check(CLI::Range(0, 100'000))
      ->capture_default_str();
  cmd->add_option("--client-threads", c.num_client_threads, "Client event-loop threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--request-timeout", c.request_timeout_s, "Per-request deadline in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--result-file", c.result_file, "Append one JSON line per run to this file");
  cmd->add_option("--extra-body", c.extra_body,
                  "A JSON object merged into every request, e.g. '{\"response_format\": {\"type\": \"json_object\"}}'");
  cmd->callback([flags] {
    const int rc = RunBenchCommand(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
