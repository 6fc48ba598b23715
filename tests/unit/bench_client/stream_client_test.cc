// The streaming client against the scripted fake server on loopback: token counts, timing
// order, failure accounting, keep-alive and timeouts.
#include "bench_client/stream_client.h"

#include <gtest/gtest.h>

#include <future>

#include "bench_client/request_body.h"
#include "fake_openai_server.h"

namespace peregrine::bench_client {
namespace {

using namespace std::chrono_literals;
using testing::FakeOpenAiServer;
using testing::FakeServerScript;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::unique_ptr<StreamClient> MakeClient(const FakeOpenAiServer& server, std::string api_key = "",
                                         double timeout_s = 10) {
  auto url = ParseBaseUrl(server.base_url());
  EXPECT_TRUE(url.ok());
  auto client = StreamClient::Create({*url, std::move(api_key), /*num_threads=*/2, timeout_s});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return std::move(client).value();
}

StreamRequest MakeRequest(const std::string& model, int max_tokens, bool is_chat = false) {
  const PromptSpec spec{"one two three four", 4, max_tokens};
  const ApiKind kind = is_chat ? ApiKind::kChatCompletions : ApiKind::kCompletions;
  return {is_chat ? "/v1/chat/completions" : "/v1/completions", BuildRequestBody(kind, model, spec, true)};
}

RequestRecord SendOne(StreamClient& client, const StreamRequest& request) {
  std::promise<RequestRecord> promise;
  client.Submit(request, [&promise](RequestRecord r) { promise.set_value(std::move(r)); });
  return promise.get_future().get();
}

TEST(StreamClientTest, CountsTokensAndOrdersTimes) {
  FakeOpenAiServer server({.first_token_delay = 40ms, .token_delay = 20ms});
  auto client = MakeClient(server);
  const RequestRecord r = SendOne(*client, MakeRequest("m", 5));
  ASSERT_TRUE(r.is_success) << r.error;
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.num_output_tokens, 5);
  EXPECT_EQ(r.num_prompt_tokens, 4);
  ASSERT_EQ(r.token_times.size(), 5u);
  EXPECT_GE(Ms(r.token_times[0] - r.send_time), 35.0);  // TTFT covers the scripted delay
  for (size_t i = 1; i < r.token_times.size(); ++i) {
    EXPECT_GE(Ms(r.token_times[i] - r.token_times[i - 1]), 10.0) << "ITL " << i;
  }
  EXPECT_GE(r.end_time, r.token_times.back());
  EXPECT_GE(Ms(r.end_time - r.send_time), 110.0);
  EXPECT_TRUE(r.error.empty());
  ASSERT_EQ(server.bodies().size(), 1u);
  EXPECT_NE(server.bodies()[0].find("\"include_usage\":true"), std::string::npos);
}

TEST(StreamClientTest, ChatRoleChunkIsNotAToken) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  const RequestRecord r = SendOne(*client, MakeRequest("m", 3, /*is_chat=*/true));
  ASSERT_TRUE(r.is_success) << r.error;
  EXPECT_EQ(r.token_times.size(), 3u);
  EXPECT_EQ(r.num_output_tokens, 3);
}

TEST(StreamClientTest, WithoutUsageCountsChunks) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  const RequestRecord r = SendOne(*client, MakeRequest("no-usage", 7));
  ASSERT_TRUE(r.is_success) << r.error;
  EXPECT_EQ(r.num_output_tokens, 7);
  EXPECT_EQ(r.num_prompt_tokens, -1);
  const RequestRecord two = SendOne(*client, MakeRequest("two-per-chunk", 8));
  ASSERT_TRUE(two.is_success) << two.error;
  EXPECT_EQ(two.num_output_tokens, 8);  // usage wins over the 4 chunks
  EXPECT_EQ(two.token_times.size(), 4u);
}

TEST(StreamClientTest, FailuresAreRecorded) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  const RequestRecord http500 = SendOne(*client, MakeRequest("fail-500", 4));
  EXPECT_FALSE(http500.is_success);
  EXPECT_EQ(http500.http_status, 500);
  EXPECT_NE(http500.error.find("HTTP 500"), std::string::npos) << http500.error;
  EXPECT_NE(http500.error.find("injected failure"), std::string::npos) << http500.error;

  const RequestRecord cut = SendOne(*client, MakeRequest("close-mid", 6));
  EXPECT_FALSE(cut.is_success);
  EXPECT_EQ(cut.http_status, 200);
  EXPECT_EQ(cut.token_times.size(), 3u);
  EXPECT_FALSE(cut.error.empty());

  const RequestRecord error_chunk = SendOne(*client, MakeRequest("error-chunk", 4));
  EXPECT_FALSE(error_chunk.is_success);
  EXPECT_NE(error_chunk.error.find("boom"), std::string::npos) << error_chunk.error;

  const RequestRecord bad_json = SendOne(*client, MakeRequest("bad-json", 4));
  EXPECT_FALSE(bad_json.is_success);
  EXPECT_NE(bad_json.error.find("not a JSON object"), std::string::npos) << bad_json.error;

  const RequestRecord ok = SendOne(*client, MakeRequest("m", 2));  // the client recovers
  EXPECT_TRUE(ok.is_success) << ok.error;
}

TEST(StreamClientTest, ConnectionRefusedIsAFailure) {
  std::string url;
  {
    FakeOpenAiServer server({});
    url = server.base_url();
  }  // the port is closed now
  auto client = StreamClient::Create({*ParseBaseUrl(url), "", 1, 5});
  ASSERT_TRUE(client.ok());
  const RequestRecord r = SendOne(**client, MakeRequest("m", 2));
  EXPECT_FALSE(r.is_success);
  EXPECT_EQ(r.http_status, 0);
  EXPECT_NE(r.error.find("connect"), std::string::npos) << r.error;
}

TEST(StreamClientTest, KeepsConnectionsAlive) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(SendOne(*client, MakeRequest("m", 2)).is_success);
  EXPECT_EQ(client->num_connections_opened(), 1);
  EXPECT_EQ(server.num_connections(), 1);
}

TEST(StreamClientTest, RetriesOnceWhenTheServerDroppedAnIdleConnection) {
  FakeOpenAiServer server({.close_idle_after = 10ms});
  auto client = MakeClient(server);
  EXPECT_TRUE(SendOne(*client, MakeRequest("m", 2)).is_success);
  std::this_thread::sleep_for(100ms);  // the server has closed the pooled connection by now
  const RequestRecord r = SendOne(*client, MakeRequest("m", 2));
  EXPECT_TRUE(r.is_success) << r.error;
  EXPECT_EQ(client->num_connections_opened(), 2);
}

TEST(StreamClientTest, SendsTheApiKey) {
  FakeOpenAiServer server({.required_api_key = "sekret"});
  auto good = MakeClient(server, "sekret");
  EXPECT_TRUE(SendOne(*good, MakeRequest("m", 2)).is_success);
  auto bad = MakeClient(server, "wrong");
  const RequestRecord r = SendOne(*bad, MakeRequest("m", 2));
  EXPECT_FALSE(r.is_success);
  EXPECT_EQ(r.http_status, 401);
}

TEST(StreamClientTest, TimeoutEndsAStuckRequest) {
  FakeOpenAiServer server({.token_delay = 100ms});
  auto client = MakeClient(server, "", /*timeout_s=*/0.25);
  const RequestRecord r = SendOne(*client, MakeRequest("m", 20));
  EXPECT_FALSE(r.is_success);
  EXPECT_GE(r.token_times.size(), 1u);
  EXPECT_LT(Ms(r.end_time - r.send_time), 1000.0);
}

TEST(StreamClientTest, GetListsModels) {
  FakeOpenAiServer server({});
  auto client = MakeClient(server);
  auto body = client->Get("/v1/models");
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_NE(body->find("fake-model"), std::string::npos);
  EXPECT_EQ(client->Get("/nope").status().code(), StatusCode::kUnavailable);  // the fake closes
}

}  // namespace
}  // namespace peregrine::bench_client
