// `peregrine bench` end to end against the fake server: sweeps, overhead mode, results file and
// the CLI flags.
#include "bench_client/bench.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/bench_command.h"
#include "fake_openai_server.h"

namespace peregrine::bench_client {
namespace {

using namespace std::chrono_literals;
using testing::FakeOpenAiServer;

class BenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    result_file_ = (std::filesystem::temp_directory_path() /
                    (std::string("peregrine_bench_") + info->name() + "_" + std::to_string(::getpid()) + ".jsonl"))
                       .string();
    std::filesystem::remove(result_file_);
    sink_ = std::tmpfile();
  }
  void TearDown() override {
    std::filesystem::remove(result_file_);
    std::fclose(sink_);
  }

  std::vector<nlohmann::json> ReadResults() const {
    std::vector<nlohmann::json> lines;
    std::ifstream in(result_file_);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  std::string result_file_;
  std::FILE* sink_ = nullptr;  // the printed tables go here
};

TEST_F(BenchTest, ConcurrencySweepWritesOneLinePerLevel) {
  FakeOpenAiServer server({.token_delay = 2ms});
  BenchConfig config;
  config.base_url = server.base_url();
  config.workload = {.num_prompts = 8, .input_len = 10, .output_len = 4, .range_ratio = 0, .seed = 3};
  config.concurrencies = {1, 4};
  config.result_file = result_file_;
  auto reports = RunBench(config, sink_);
  ASSERT_TRUE(reports.ok()) << reports.status().ToString();
  ASSERT_EQ(reports->size(), 2u);
  EXPECT_EQ((*reports)[0].model, "fake-model");  // asked /v1/models
  EXPECT_EQ((*reports)[1].max_in_flight, 4);
  for (const RunReport& r : *reports) {
    EXPECT_EQ(r.metrics.num_completed, 8);
    EXPECT_EQ(r.metrics.total_output_tokens, 32);
    EXPECT_EQ(r.metrics.total_input_tokens, 80);
  }
  EXPECT_EQ(server.bodies().size(), 1u + 16u);  // the warm-up request, then two runs
  const auto lines = ReadResults();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["mode"], "concurrency");
  EXPECT_EQ(lines[1]["concurrency"], 4);
  EXPECT_EQ(lines[1]["completed"], 8);
  EXPECT_EQ(lines[1]["failed"], 0);
  for (const char* key : {"mean_ttft_ms", "median_tpot_ms", "p90_itl_ms", "p99_e2el_ms", "output_throughput"}) {
    EXPECT_TRUE(lines[1][key].is_number()) << key;
  }
}

TEST_F(BenchTest, OverheadModeSendsOneTokenRequests) {
  FakeOpenAiServer server({});
  BenchConfig config;
  config.base_url = server.base_url();
  config.model = "m";
  config.endpoint = "/v1/chat/completions";
  config.workload = {.num_prompts = 10, .input_len = 4, .output_len = 64, .range_ratio = 0, .seed = 0};
  config.concurrencies = {2};
  config.is_server_overhead = true;
  config.result_file = result_file_;
  auto reports = RunBench(config, sink_);
  ASSERT_TRUE(reports.ok()) << reports.status().ToString();
  for (const std::string& body : server.bodies()) EXPECT_EQ(nlohmann::json::parse(body)["max_tokens"], 1);
  const auto lines = ReadResults();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["mode"], "overhead");
  EXPECT_TRUE(lines[0]["request_overhead_p99_ms"].is_number());
  EXPECT_TRUE(lines[0]["mean_tpot_ms"].is_null());  // one token: no TPOT
}

TEST_F(BenchTest, FailedRequestsAreCountedNotFatal) {
  FakeOpenAiServer server({});
  BenchConfig config;
  config.base_url = server.base_url();
  config.model = "fail-500";
  config.num_warmups = 0;
  config.workload = {.num_prompts = 3, .input_len = 4, .output_len = 4, .range_ratio = 0, .seed = 0};
  auto reports = RunBench(config, sink_);
  ASSERT_TRUE(reports.ok());
  EXPECT_EQ((*reports)[0].metrics.num_failed, 3);
  ASSERT_EQ((*reports)[0].metrics.errors.size(), 1u);
  EXPECT_EQ((*reports)[0].metrics.errors[0].num_requests, 3);
  config.num_warmups = 1;  // a warm-up that fails stops the bench
  EXPECT_EQ(RunBench(config, sink_).status().code(), StatusCode::kUnavailable);
}

TEST_F(BenchTest, CommandLineRunsARateSweep) {
  FakeOpenAiServer server({});
  CLI::App app;
  cli::AddBenchCommand(app);
  const std::vector<std::string> args = {
      "bench",          "--base-url", server.base_url(), "--model",       "m",        "--num-prompts",
      "6",              "--input-len", "5",              "--output-len", "3",        "--request-rate",
      "200,inf",        "--max-concurrency", "2",        "--result-file", result_file_, "--warmup", "0"};
  std::vector<const char*> argv = {"peregrine"};
  for (auto it = args.begin(); it != args.end(); ++it) argv.push_back(it->c_str());
  ASSERT_NO_THROW(app.parse(static_cast<int>(argv.size()), argv.data()));
  const auto lines = ReadResults();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["mode"], "rate");
  EXPECT_EQ(lines[0]["request_rate"], 200.0);
  EXPECT_EQ(lines[1]["request_rate"], "inf");
  EXPECT_EQ(lines[1]["max_concurrency"], 2);
  EXPECT_LE(lines[1]["max_in_flight"], 2);
  EXPECT_EQ(lines[1]["completed"], 6);
}

}  // namespace
}  // namespace peregrine::bench_client
