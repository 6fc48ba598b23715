// /v1/completions: prompt forms, batches, echo, logprobs, streaming.
#include "server_fixture.h"
#include "tokenizer/utf8.h"

namespace peregrine::server::testing {
namespace {

TEST_F(ServerTest, CompletionFromText) {
  ScriptText(" jumps over the lazy dog", false);
  ClientResponse r = Completion({{"model", kModel}, {"prompt", "The quick brown fox"}, {"max_tokens", 64}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Body(r);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["text"], " jumps over the lazy dog");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");  // the script ran out
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].prompt_ids, Encode("The quick brown fox"));
  EXPECT_EQ(body["usage"]["prompt_tokens"], Encode("The quick brown fox").size());
  EXPECT_EQ(body["usage"]["completion_tokens"], Encode(" jumps over the lazy dog").size());
}

TEST_F(ServerTest, CompletionDefaultsToSixteenTokens) {
  ScriptText("x");
  ASSERT_EQ(Completion({{"prompt", "hi"}}).status, 200);
  EXPECT_EQ(engine_->submitted()[0].max_tokens, 16);
}

TEST_F(ServerTest, CompletionFromTokenIdsAndBatches) {
  ScriptText("ok");
  const std::vector<int32_t> ids = Encode("Count: one two");
  Json body = Body(Completion({{"prompt", ids}, {"max_tokens", 5}}));
  EXPECT_EQ(body["choices"][0]["text"], "ok");
  EXPECT_EQ(engine_->submitted()[0].prompt_ids, ids);

  body = Body(Completion({{"prompt", {"first prompt", "second prompt"}}, {"n", 2}, {"max_tokens", 5}}));
  ASSERT_EQ(body["choices"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(body["choices"][i]["index"], i);
  EXPECT_EQ(body["usage"]["prompt_tokens"],
            Encode("first prompt").size() + Encode("second prompt").size());
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests[1].prompt_ids, Encode("first prompt"));
  EXPECT_EQ(requests[2].prompt_ids, Encode("first prompt"));
  EXPECT_EQ(requests[3].prompt_ids, Encode("second prompt"));

  body = Body(Completion({{"prompt", Json::array({Encode("a b"), Encode("c d")})}, {"max_tokens", 5}}));
  ASSERT_EQ(body["choices"].size(), 2u);
}

TEST_F(ServerTest, CompletionEcho) {
  ScriptText(" world");
  Json body = Body(Completion({{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 5}}));
  EXPECT_EQ(body["choices"][0]["text"], "Hello world");
  // Row 10: max_tokens 0 with echo returns the prompt and generates nothing.
  body = Body(Completion({{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 0}}));
  EXPECT_EQ(body["choices"][0]["text"], "Hello");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 0);
  EXPECT_EQ(engine_->num_submitted(), 1);
  ClientResponse s = Completion({{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 0}, {"stream", true}});
  EXPECT_EQ(StreamedField(s.body, "text"), "Hello");
  EXPECT_EQ(SseData(s.body).back(), "[DONE]");
  s = Completion({{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 5}, {"stream", true}});
  EXPECT_EQ(StreamedField(s.body, "text"), "Hello world");
}

TEST_F(ServerTest, CompletionLogprobsShape) {
  ScriptText("a b c", false);
  const size_t n = Encode("a b c").size();
  Json body = Body(Completion({{"prompt", "x"}, {"logprobs", 3}, {"max_tokens", 10}}));
  const Json& lp = body["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << body.dump();
  EXPECT_EQ(lp["tokens"].size(), n);
  EXPECT_EQ(lp["token_logprobs"].size(), n);
  EXPECT_EQ(lp["top_logprobs"].size(), n);
  EXPECT_EQ(lp["text_offset"].size(), n);
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::string joined;
  for (const Json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, "a b c");
  for (const Json& top : lp["top_logprobs"]) {
    EXPECT_TRUE(top.is_object());
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 4u);
  }
  ClientResponse s = Completion({{"prompt", "x"}, {"logprobs", 3}, {"max_tokens", 10}, {"stream", true}});
  size_t streamed = 0;
  int64_t last_offset = -1;
  for (const std::string& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    const Json& l = chunk["choices"][0]["logprobs"];
    if (!l.is_object()) continue;
    streamed += l["tokens"].size();
    for (const Json& off : l["text_offset"]) {
      EXPECT_GT(off.get<int64_t>(), last_offset);
      last_offset = off.get<int64_t>();
    }
  }
  EXPECT_EQ(streamed, n);
}

TEST_F(ServerTest, CompletionStreamMatchesWhole) {
  const std::string text = " — streamed ünïcödé 🚀 text";
  ScriptText(text);
  Json request = {{"prompt", "p"}, {"max_tokens", 100}, {"stream", true},
                  {"stream_options", {{"include_usage", true}}}};
  ClientResponse s = Completion(request);
  ASSERT_EQ(s.status, 200);
  const auto events = SseData(s.body);
  for (const std::string& e : events) EXPECT_TRUE(tokenizer::IsValidUtf8(e));
  EXPECT_EQ(StreamedField(s.body, "text"), text);
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], Encode(text).size() + 1);
}

TEST_F(ServerTest, CompletionStopString) {
  ScriptText("line one\nline two\nline three");
  Json body = Body(Completion({{"prompt", "p"}, {"max_tokens", 100}, {"stop", "\nline t"}}));
  EXPECT_EQ(body["choices"][0]["text"], "line one");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace peregrine::server::testing
