// Closed- and open-loop runs against the fake server, including a few hundred concurrent streams.
#include "bench_client/load_runner.h"

#include <gtest/gtest.h>

#include <limits>

#include "bench_client/request_body.h"
#include "bench_client/workload.h"
#include "fake_openai_server.h"

namespace peregrine::bench_client {
namespace {

using namespace std::chrono_literals;
using testing::FakeOpenAiServer;

std::vector<StreamRequest> MakeRequests(int n, int max_tokens) {
  std::vector<StreamRequest> requests;
  for (int i = 0; i < n; ++i) {
    const PromptSpec spec{"a b c", 3, max_tokens};
    requests.push_back({"/v1/completions", BuildRequestBody(ApiKind::kCompletions, "m", spec, true)});
  }
  return requests;
}

std::unique_ptr<StreamClient> MakeClient(const FakeOpenAiServer& server) {
  return std::move(StreamClient::Create({*ParseBaseUrl(server.base_url()), "", 2, 10})).value();
}

int NumSucceeded(const RunResult& result) {
  int n = 0;
  for (const RequestRecord& r : result.records) n += r.is_success;
  return n;
}

TEST(LoadRunnerTest, ClosedLoopKeepsConcurrencyInFlight) {
  FakeOpenAiServer server({.token_delay = 5ms});
  auto client = MakeClient(server);
  const auto requests = MakeRequests(16, 4);
  auto result = RunLoad(*client, requests, ClosedLoop{4});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->records.size(), 16u);
  EXPECT_EQ(NumSucceeded(*result), 16);
  EXPECT_EQ(result->max_in_flight, 4);
  EXPECT_GT(result->duration_s, 0.0);
  EXPECT_LE(client->num_connections_opened(), 4);  // completed connections are reused
}

TEST(LoadRunnerTest, OpenLoopFollowsThePoissonSchedule) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  const auto requests = MakeRequests(20, 2);
  const OpenLoop shape{.request_rate = 100.0, .max_concurrency = 0, .seed = 5};
  auto result = RunLoad(*client, requests, shape);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(NumSucceeded(*result), 20);
  const auto offsets = PoissonArrivalOffsets(20, 100.0, 5);
  const Clock::time_point first = result->records[0].send_time;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const double sent = std::chrono::duration<double>(result->records[i].send_time - first).count();
    EXPECT_GE(sent, offsets[i] - 0.002) << "request " << i;
    EXPECT_LE(sent, offsets[i] + 0.050) << "request " << i;
  }
  EXPECT_GE(result->duration_s, offsets.back());
}

TEST(LoadRunnerTest, OpenLoopRespectsMaxConcurrency) {
  FakeOpenAiServer server({.token_delay = 5ms});
  auto client = MakeClient(server);
  const auto requests = MakeRequests(12, 3);
  const OpenLoop shape{.request_rate = std::numeric_limits<double>::infinity(), .max_concurrency = 3, .seed = 0};
  auto result = RunLoad(*client, requests, shape);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(NumSucceeded(*result), 12);
  EXPECT_EQ(result->max_in_flight, 3);
}

TEST(LoadRunnerTest, HundredsOfStreamsOnTwoThreads) {
  FakeOpenAiServer server({.first_token_delay = 50ms, .token_delay = 20ms});
  auto client = MakeClient(server);
  constexpr int kStreams = 300;
  const auto requests = MakeRequests(kStreams, 5);
  auto result = RunLoad(*client, requests, ClosedLoop{kStreams});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(NumSucceeded(*result), kStreams);
  EXPECT_EQ(result->max_in_flight, kStreams);
  EXPECT_LT(result->duration_s, 15.0);  // one at a time would take 300 × 130 ms = 39 s
  for (const RequestRecord& r : result->records) EXPECT_EQ(r.token_times.size(), 5u) << r.error;
}

TEST(LoadRunnerTest, RejectsBadShapes) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  const auto requests = MakeRequests(1, 1);
  EXPECT_EQ(RunLoad(*client, requests, ClosedLoop{0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RunLoad(*client, requests, OpenLoop{.request_rate = 0}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::bench_client
