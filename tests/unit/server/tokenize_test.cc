// POST /tokenize and /detokenize: vLLM's shapes, the chat prompt the chat route renders, and
// the usual 4xx envelope for bad ids and unknown models.
#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

class TokenizeTest : public ServerTest {
 protected:
  Json Post(uint16_t port, const char* path, const Json& body) {
    ClientResponse r = PostJson(port, path, body.dump());
    EXPECT_EQ(r.status, 200) << path << " " << r.body;
    return Body(r);
  }
};

TEST_F(TokenizeTest, TokenizePromptAndBack) {
  Json t = Post(port_, "/tokenize", {{"prompt", "Hello world"}, {"model", kModel}});
  const std::vector<int32_t> plain = Encode("Hello world");
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["max_model_len"], kMaxContext);
  EXPECT_TRUE(t["token_strs"].is_null());
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(),
            *tok().Encode("Hello world", true, /*add_special_tokens=*/true));
  Json no_special = Post(port_, "/tokenize", {{"prompt", "Hello world"}, {"add_special_tokens", false},
                                              {"return_token_strs", true}});
  EXPECT_EQ(no_special["tokens"].get<std::vector<int32_t>>(), plain);
  ASSERT_EQ(no_special["token_strs"].size(), plain.size());
  EXPECT_EQ(no_special["token_strs"][0], std::string(*tok().IdToToken(plain[0])));

  Json d = Post(port_, "/detokenize", {{"tokens", plain}, {"model", kModel}});
  EXPECT_EQ(d["prompt"], "Hello world");
  EXPECT_EQ(Post(port_, "/detokenize", {{"tokens", Json::array()}})["prompt"], "");
}

TEST_F(TokenizeTest, TokenizeMessagesMatchesTheChatPrompt) {
  ScriptText("ok");
  const Json messages = Json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "hi"}}});
  for (const Json& extra : {Json::object(), Json({{"thinking", {{"type", "enabled"}}}}),
                            Json({{"add_generation_prompt", false}})}) {
    Json request = {{"messages", messages}};
    request.update(extra);
    ASSERT_EQ(Chat(request).status, 200);
    Json t = Post(port_, "/tokenize", request);
    EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), engine_->submitted().back().prompt_ids)
        << extra.dump();
  }
  Json cont = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}},
                                         {{"role", "assistant"}, {"content", "Hel"}}})},
               {"continue_final_message", true}};
  const std::vector<int32_t> ids = Post(port_, "/tokenize", cont)["tokens"].get<std::vector<int32_t>>();
  EXPECT_TRUE(tok().Decode(ids).ends_with("Hel"));
  cont["add_generation_prompt"] = true;
  ExpectInvalid(PostJson(port_, "/tokenize", cont.dump()), "both");
}

TEST_F(TokenizeTest, TokenizeAndDetokenizeRefuseBadInput) {
  const int before = engine_->num_submitted();
  for (const char* body : {R"({})", R"({"prompt":5})", R"({"prompt":"a","messages":[{"role":"user","content":"x"}]})",
                           R"({"messages":[]})", R"({"prompt":"a","add_special_tokens":"yes"})",
                           R"({"prompt":"a","return_token_strs":1})", "{", R"({"prompt":"a","model":5})"}) {
    ExpectInvalid(PostJson(port_, "/tokenize", body), body);
  }
  for (const char* body : {R"({})", R"({"tokens":[-1]})", R"({"tokens":[129280]})",
                           R"({"tokens":[4294967296]})", R"({"tokens":"1 2"})", R"({"tokens":[1.5]})"}) {
    ClientResponse r = PostJson(port_, "/detokenize", body);
    ExpectInvalid(r, body);
    EXPECT_EQ(Body(r)["error"]["param"], "tokens") << body;
  }
  EXPECT_EQ(Body(PostJson(port_, "/detokenize", R"({"tokens":[-1]})"))["error"]["code"],
            "invalid_token_id");
  for (const char* path : {"/tokenize", "/detokenize"}) {
    ClientResponse r = PostJson(port_, path, R"({"model":"gpt-9","prompt":"a","tokens":[1]})");
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(Body(r)["error"]["code"], "model_not_found") << path;
    EXPECT_EQ(Fetch(port_, "GET", path).status, 405) << path;
  }
  EXPECT_EQ(engine_->num_submitted(), before);
  ExpectAlive();
}

}  // namespace
}  // namespace peregrine::server::testing
