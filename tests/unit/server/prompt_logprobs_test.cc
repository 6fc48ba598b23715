// Prompt logprobs through the HTTP API: completions' echo with logprobs (the prompt's tokens
// lead the logprobs, the first with nulls; max_tokens 0 scores without generating, as
// lm-evaluation-harness asks), vLLM's prompt_logprobs on completions (per choice) and chat
// (top-level), streamed and not, and their validation.
#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

std::string TokenText(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[] = {id};
  return tokenizer.Decode(ids, /*skip_special_tokens=*/false);
}

TEST_F(ServerTest, CompletionEchoWithLogprobsLeadsWithThePromptTokens) {
  ScriptText(" world", false);
  Json body = Body(Completion({{"prompt", "Hello there"}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 5}}));
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].prompt_logprobs, 2);
  const std::vector<int32_t>& prompt = requests[0].prompt_ids;
  const size_t generated = Encode(" world").size();
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "Hello there world");
  EXPECT_FALSE(choice.contains("prompt_logprobs"));
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + generated) << body.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  const std::vector<SampleResult> scores = FakePromptScores(prompt, 2, kVocabSize);
  for (size_t i = 1; i < prompt.size(); ++i) {
    EXPECT_EQ(lp["tokens"][i], TokenText(tok(), prompt[i])) << i;
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), scores[i - 1].logprob) << i;
    EXPECT_TRUE(lp["top_logprobs"][i].contains(TokenText(tok(), prompt[i]))) << i;
    EXPECT_GE(lp["text_offset"][i].get<int64_t>(), lp["text_offset"][i - 1].get<int64_t>());
  }
  // The generated tokens follow, their offsets continuing the prompt's.
  EXPECT_FLOAT_EQ(lp["token_logprobs"][prompt.size()].get<float>(), -0.25f);
  EXPECT_GT(lp["text_offset"][prompt.size()].get<int64_t>(), lp["text_offset"][prompt.size() - 1].get<int64_t>());
}

TEST_F(ServerTest, CompletionEchoLogprobsWithZeroMaxTokensScoresOnly) {
  ScriptText("never");
  Json body = Body(Completion({{"prompt", "Score this text"}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}}));
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].max_tokens, 0);
  EXPECT_EQ(requests[0].prompt_logprobs, 0);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "Score this text");
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 0);
  const size_t n = requests[0].prompt_ids.size();
  ASSERT_EQ(choice["logprobs"]["token_logprobs"].size(), n);
  EXPECT_TRUE(choice["logprobs"]["token_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(choice["logprobs"]["token_logprobs"][n - 1].get<float>(), -0.5f * static_cast<float>(n - 1));
  // Only the token itself in each top_logprobs entry with logprobs 0.
  EXPECT_EQ(choice["logprobs"]["top_logprobs"][1].size(), 1u);
}

TEST_F(ServerTest, CompletionEchoLogprobsStreamedComeWithTheEcho) {
  ScriptText(" world", false);
  ClientResponse r = Completion({{"prompt", "Hello"}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 5}, {"stream", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(StreamedField(r.body, "text"), "Hello world");
  const std::vector<std::string> events = SseData(r.body);
  ASSERT_GE(events.size(), 2u);
  const Json first = Json::parse(events.front());
  EXPECT_EQ(first["choices"][0]["text"], "Hello");
  const size_t n = engine_->submitted()[0].prompt_ids.size();
  ASSERT_EQ(first["choices"][0]["logprobs"]["tokens"].size(), n) << events.front();
  EXPECT_TRUE(first["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
  // Score only, streamed: the echo with its logprobs, the finish, [DONE].
  r = Completion({{"prompt", "Hello"}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}, {"stream", true}});
  EXPECT_EQ(StreamedField(r.body, "text"), "Hello");
  EXPECT_EQ(SseData(r.body).back(), "[DONE]");
}

TEST_F(ServerTest, CompletionPromptLogprobsInVllmsShape) {
  ScriptText("ok");
  Json body = Body(Completion({{"prompt", "one two three"}, {"prompt_logprobs", 2}, {"max_tokens", 3}, {"n", 2}}));
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 2u);
  const std::vector<int32_t>& prompt = requests[0].prompt_ids;
  for (size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(requests[c].prompt_logprobs, 2);
    const Json& pl = body["choices"][c]["prompt_logprobs"];
    ASSERT_EQ(pl.size(), prompt.size()) << body.dump();
    EXPECT_TRUE(pl[0].is_null());
    for (size_t i = 1; i < prompt.size(); ++i) {
      const Json& own = pl[i][std::to_string(prompt[i])];
      EXPECT_FLOAT_EQ(own["logprob"].get<float>(), -0.5f * static_cast<float>(i));
      EXPECT_EQ(own["rank"], static_cast<int64_t>(i));
      EXPECT_EQ(own["decoded_token"], TokenText(tok(), prompt[i]));
      EXPECT_EQ(pl[i].size(), 3u);  // the token and two alternatives
      const Json& alt = pl[i][std::to_string((prompt[i] + 1) % kVocabSize)];
      EXPECT_EQ(alt["rank"], 1);
    }
  }
  // Streamed: the choice's first chunk carries them.
  ClientResponse r = Completion({{"prompt", "one two"}, {"prompt_logprobs", 0}, {"max_tokens", 3}, {"stream", true}});
  const Json first = Json::parse(SseData(r.body).front());
  ASSERT_TRUE(first["choices"][0].contains("prompt_logprobs")) << r.body;
  EXPECT_TRUE(first["choices"][0]["prompt_logprobs"][0].is_null());
}

TEST_F(ServerTest, ChatPromptLogprobsAreTopLevel) {
  ScriptText("Hi!");
  const Json messages = Json::array({{{"role", "user"}, {"content", "Hello"}}});
  Json body = Body(Chat({{"messages", messages}, {"prompt_logprobs", 1}, {"n", 2}}));
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].prompt_logprobs, 1);
  EXPECT_EQ(requests[1].prompt_logprobs, -1);  // the choices share one prompt
  ASSERT_TRUE(body.contains("prompt_logprobs")) << body.dump();
  EXPECT_EQ(body["prompt_logprobs"].size(), requests[0].prompt_ids.size());
  EXPECT_TRUE(body["prompt_logprobs"][0].is_null());
  ClientResponse r = Chat({{"messages", messages}, {"prompt_logprobs", 0}, {"stream", true}});
  bool found = false;
  for (const std::string& data : SseData(r.body)) {
    if (data == "[DONE]") continue;
    const Json chunk = Json::parse(data);
    if (!chunk.contains("prompt_logprobs")) continue;
    EXPECT_FALSE(found) << "prompt_logprobs sent twice";
    found = true;
    EXPECT_EQ(chunk["prompt_logprobs"].size(), engine_->submitted().back().prompt_ids.size());
  }
  EXPECT_TRUE(found) << r.body;
  EXPECT_EQ(StreamedField(r.body, "content"), "Hi!");
}

TEST_F(ServerTest, PromptLogprobsOutOfRangeAreRefused) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "Hello"}}});
  for (const int v : {-1, 21}) {
    ExpectInvalid(Chat({{"messages", messages}, {"prompt_logprobs", v}}), "chat prompt_logprobs");
    ExpectInvalid(Completion({{"prompt", "x"}, {"prompt_logprobs", v}}), "completion prompt_logprobs");
  }
  ExpectInvalid(Completion({{"prompt", "x"}, {"prompt_logprobs", "2"}}), "string prompt_logprobs");
  EXPECT_EQ(engine_->num_submitted(), 0);
  ExpectAlive();
}

}  // namespace
}  // namespace peregrine::server::testing
