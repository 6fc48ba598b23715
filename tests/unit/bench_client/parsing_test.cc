// Event-stream framing, chunk parsing, request bodies and base URLs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench_client/base_url.h"
#include "bench_client/report.h"
#include "bench_client/request_body.h"
#include "bench_client/sse_decoder.h"
#include "bench_client/stream_chunk.h"

namespace peregrine::bench_client {
namespace {

TEST(SseDecoderTest, SameEventsWhereverTheBytesSplit) {
  const std::string body =
      ": keep-alive comment\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: message\n"
      "data: line one\n"
      "data:line two\n"
      "\n"
      "data: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "line one\nline two", "[DONE]"};
  for (size_t split = 0; split <= body.size(); ++split) {
    SseDecoder decoder;
    std::vector<std::string> events;
    decoder.Feed(std::string_view(body).substr(0, split), events);
    decoder.Feed(std::string_view(body).substr(split), events);
    decoder.Finish(events);
    EXPECT_EQ(events, expected) << "split at " << split;
  }
  SseDecoder decoder;  // one byte at a time
  std::vector<std::string> events;
  for (char c : body) decoder.Feed(std::string_view(&c, 1), events);
  EXPECT_EQ(events, expected);
}

TEST(SseDecoderTest, FinishFlushesAnUnterminatedEvent) {
  SseDecoder decoder;
  std::vector<std::string> events;
  decoder.Feed("data: [DONE]", events);
  EXPECT_TRUE(events.empty());
  decoder.Finish(events);
  EXPECT_EQ(events, std::vector<std::string>{"[DONE]"});
}

TEST(StreamChunkTest, CompletionText) {
  auto chunk = ParseStreamChunk(R"({"choices":[{"index":0,"text":" hi","finish_reason":null}]})");
  ASSERT_TRUE(chunk.ok());
  EXPECT_TRUE(chunk->has_text);
  EXPECT_FALSE(chunk->is_done);
  EXPECT_FALSE(chunk->completion_tokens.has_value());
}

TEST(StreamChunkTest, ChatDeltas) {
  EXPECT_FALSE(ParseStreamChunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})")->has_text);
  EXPECT_TRUE(ParseStreamChunk(R"({"choices":[{"delta":{"content":"x"}}]})")->has_text);
  EXPECT_TRUE(ParseStreamChunk(R"({"choices":[{"delta":{"reasoning_content":"hm"}}]})")->has_text);
  EXPECT_TRUE(ParseStreamChunk(R"({"choices":[{"delta":{"tool_calls":[{"index":0}]}}]})")->has_text);
  EXPECT_FALSE(ParseStreamChunk(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})")->has_text);
}

TEST(StreamChunkTest, UsageDoneErrorAndGarbage) {
  auto usage = ParseStreamChunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34}})");
  ASSERT_TRUE(usage.ok());
  EXPECT_FALSE(usage->has_text);
  EXPECT_EQ(usage->prompt_tokens, 12);
  EXPECT_EQ(usage->completion_tokens, 34);
  EXPECT_TRUE(ParseStreamChunk("[DONE]")->is_done);
  EXPECT_EQ(ParseStreamChunk(R"({"error":{"message":"overloaded"}})")->error, "overloaded");
  EXPECT_EQ(ParseStreamChunk("{\"x\":").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseStreamChunk("[1,2]").status().code(), StatusCode::kDataLoss);
}

TEST(RequestBodyTest, CompletionsAndChat) {
  PromptSpec spec{"the of and", 3, 7};
  const auto completion = nlohmann::json::parse(BuildRequestBody(ApiKind::kCompletions, "m", spec, true));
  EXPECT_EQ(completion["model"], "m");
  EXPECT_EQ(completion["prompt"], "the of and");
  EXPECT_EQ(completion["max_tokens"], 7);
  EXPECT_EQ(completion["stream"], true);
  EXPECT_EQ(completion["stream_options"]["include_usage"], true);
  EXPECT_EQ(completion["ignore_eos"], true);
  const auto chat = nlohmann::json::parse(BuildRequestBody(ApiKind::kChatCompletions, "", spec, false));
  EXPECT_FALSE(chat.contains("model"));
  EXPECT_FALSE(chat.contains("ignore_eos"));
  // An extra body is merged last, its keys replacing the defaults.
  const auto extra = nlohmann::json::parse(BuildRequestBody(
      ApiKind::kChatCompletions, "m", spec, true, R"({"response_format": {"type": "json_object"}, "temperature": 0.5})"));
  EXPECT_EQ(extra["response_format"]["type"], "json_object");
  EXPECT_EQ(extra["temperature"], 0.5);
  EXPECT_EQ(extra["ignore_eos"], true);
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "the of and");
  EXPECT_EQ(ApiKindForEndpoint("/v1/chat/completions"), ApiKind::kChatCompletions);
  EXPECT_EQ(ApiKindForEndpoint("/v1/completions/"), ApiKind::kCompletions);
}

TEST(BaseUrlTest, ParsesHostPortAndPrefix) {
  auto url = ParseBaseUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, "8000");
  EXPECT_EQ(url->path_prefix, "");
  EXPECT_EQ(HostHeader(*url), "127.0.0.1:8000");
  auto prefixed = ParseBaseUrl("http://localhost/api/");
  ASSERT_TRUE(prefixed.ok());
  EXPECT_EQ(prefixed->port, "80");
  EXPECT_EQ(prefixed->path_prefix, "/api");
  EXPECT_EQ(HostHeader(*prefixed), "localhost");
  auto v6 = ParseBaseUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(HostHeader(*v6), "[::1]:9000");
  EXPECT_EQ(ParseBaseUrl("https://x").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ParseBaseUrl("ftp://x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBaseUrl("http://x:0").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBaseUrl("http://x:99999").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBaseUrl("http://:80").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::bench_client

namespace peregrine::bench_client {
namespace {

TEST(SpecDecodeCountersTest, SumsTheCountersUnderAnyPrefix) {
  const std::string text =
      "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
      "# TYPE vllm:spec_decode_num_drafts_total counter\n"
      "vllm:spec_decode_num_drafts_total{model_name=\"m\",engine=\"0\"} 40\n"
      "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\",engine=\"0\"} 120\n"
      "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\",engine=\"0\"} 66\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 30\n"
      "vllm:num_requests_running{model_name=\"m\"} 3\n";
  const std::optional<SpecDecodeDelta> d = ParseSpecDecodeCounters(text);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->num_drafts, 40);
  EXPECT_EQ(d->num_draft_tokens, 120);
  EXPECT_EQ(d->num_accepted_tokens, 66);
  EXPECT_DOUBLE_EQ(d->mean_accept_length(), 1.0 + 66.0 / 40.0);
  EXPECT_DOUBLE_EQ(d->acceptance_rate(), 66.0 / 120.0);
  EXPECT_FALSE(ParseSpecDecodeCounters("peregrine:num_requests_running 1\n# x\n").has_value());
  EXPECT_FALSE(ParseSpecDecodeCounters("peregrine:spec_decode_num_drafts_total{} garbage").has_value());
}

}  // namespace
}  // namespace peregrine::bench_client
