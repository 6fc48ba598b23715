// Structured outputs at the server: every spelling of a constraint reaches the engine as a
// compiled grammar (the scripted engine does not apply it; the engine and e2e tests do), the
// schema is shown to the model as DeepSeek-V4's encoding writes it, forced tool calls become
// a grammar, and bad constraints are 400s that leave the server serving.
#include "chat/v4_encoder.h"
#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

Json UserMessages(const std::string& text) { return Json::array({{{"role", "user"}, {"content", text}}}); }

const Json kSchema = {{"type", "object"},
                      {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}}}}},
                      {"required", {"name", "age"}}};

Json Tools() {
  return Json::array({{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}}},
                           {"required", {"city"}}}}}}},
                      {{"type", "function"},
                       {"function", {{"name", "get_time"}, {"parameters", {{"type", "object"}}}}}}});
}

class StructuredTest : public ServerTest {
 protected:
  // The request the engine got, after a 200.
  EngineRequest Accepted(const ClientResponse& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    const auto requests = engine_->submitted();
    EXPECT_FALSE(requests.empty());
    return requests.empty() ? EngineRequest{} : requests.back();
  }
  void ExpectRejected(const ClientResponse& r, const std::string& param, const std::string& code = "") {
    ASSERT_EQ(r.status, 400) << r.body;
    const Json body = Body(r);
    EXPECT_EQ(body["error"]["param"], param) << r.body;
    EXPECT_TRUE(body["error"]["code"].is_string()) << r.body;
    if (!code.empty()) {
      EXPECT_EQ(body["error"]["code"], code) << r.body;
    }
  }
};

TEST_F(StructuredTest, JsonSchemaGoesToTheEngineAndIntoTheSystemPrompt) {
  ScriptText("{}");
  const Json format = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kSchema}}}};
  const EngineRequest r = Accepted(Chat({{"messages", UserMessages("Who?")}, {"response_format", format}}));
  EXPECT_NE(r.grammar, nullptr);
  EXPECT_EQ(r.grammar_after, -1) << "chat mode: constrained from the first token";
  // The prompt is the encoder's with the response_format on a system message.
  const Json messages = Json::array({{{"role", "system"}, {"content", ""}, {"response_format", format}},
                                     {{"role", "user"}, {"content", "Who?"}}});
  auto prompt = chat::EncodeV4Prompt(messages, nullptr, chat::V4EncodeOptions{});
  ASSERT_TRUE(prompt.ok());
  EXPECT_NE(prompt->find("## Response Format"), std::string::npos);
  EXPECT_EQ(r.prompt_ids, Encode(*prompt));

  // An existing system message carries it instead.
  const Json with_system = Json::array({{{"role", "system"}, {"content", "Be terse."}},
                                        {{"role", "user"}, {"content", "Who?"}}});
  const EngineRequest r2 = Accepted(Chat({{"messages", with_system}, {"response_format", format}}));
  Json expected = with_system;
  expected[0]["response_format"] = format;
  auto prompt2 = chat::EncodeV4Prompt(expected, nullptr, chat::V4EncodeOptions{});
  ASSERT_TRUE(prompt2.ok());
  EXPECT_EQ(r2.prompt_ids, Encode(*prompt2));
}

TEST_F(StructuredTest, EverySpellingCompilesToAGrammar) {
  ScriptText("a");
  const std::vector<Json> chat_bodies = {
      {{"response_format", {{"type", "json_object"}}}},
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}},
      {{"structured_outputs", {{"json", kSchema}}}},
      {{"structured_outputs", {{"json", kSchema.dump()}, {"disable_any_whitespace", true}}}},
      {{"structured_outputs", {{"regex", "[a-z]+@[a-z]+\\.com"}}}},
      {{"structured_outputs", {{"choice", {"yes", "no"}}}}},
      {{"structured_outputs", {{"grammar", "root ::= \"a\" | \"b\""}}}},
      {{"structured_outputs", {{"json_object", true}}}},
      {{"guided_json", kSchema}},
      {{"guided_json", kSchema.dump()}, {"guided_decoding_backend", "xgrammar"}},
      {{"guided_regex", "\\d{3}"}},
      {{"guided_choice", {"red", "green"}}},
      {{"guided_grammar", "root ::= [0-9]+"}},
      {{"json_schema", kSchema.dump()}},
      {{"regex", "(ab)+"}},
      {{"ebnf", "root ::= \"x\"+"}},
      {{"response_format",
        {{"type", "structural_tag"},
         {"structures", {{{"begin", "<f>"}, {"schema", kSchema}, {"end", "</f>"}}}},
         {"triggers", {"<f>"}}}}},
  };
  for (const Json& extra : chat_bodies) {
    Json body = {{"messages", UserMessages("go")}, {"max_tokens", 5}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    const EngineRequest r = Accepted(Chat(body));
    EXPECT_NE(r.grammar, nullptr) << extra.dump();
  }
  // Completions take the same fields; text needs no grammar.
  const EngineRequest c = Accepted(Completion({{"prompt", "x"}, {"max_tokens", 3}, {"guided_regex", "[0-9]+"}}));
  EXPECT_NE(c.grammar, nullptr);
  const EngineRequest t = Accepted(Chat({{"messages", UserMessages("go")}, {"response_format", {{"type", "text"}}}}));
  EXPECT_EQ(t.grammar, nullptr);
}

TEST_F(StructuredTest, ThinkingLeavesTheReasoningFree) {
  ScriptText("a");
  const Json body = {{"messages", UserMessages("go")},
                     {"chat_template_kwargs", {{"thinking", true}}},
                     {"response_format", {{"type", "json_object"}}}};
  const EngineRequest r = Accepted(Chat(body));
  ASSERT_NE(r.grammar, nullptr);
  auto end = tok().SpecialTokenId("</think>");
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(r.grammar_after, *end);
}

TEST_F(StructuredTest, ForcedToolCallsAreAGrammar) {
  ScriptText("a");
  for (const Json& choice : {Json("required"),
                             Json{{"type", "function"}, {"function", {{"name", "get_time"}}}}}) {
    for (bool parallel : {true, false}) {
      const EngineRequest r = Accepted(Chat({{"messages", UserMessages("weather?")},
                                             {"tools", Tools()},
                                             {"tool_choice", choice},
                                             {"parallel_tool_calls", parallel}}));
      EXPECT_NE(r.grammar, nullptr) << choice.dump();
    }
  }
  const EngineRequest automatic =
      Accepted(Chat({{"messages", UserMessages("weather?")}, {"tools", Tools()}, {"tool_choice", "auto"}}));
  EXPECT_EQ(automatic.grammar, nullptr);
}

TEST_F(StructuredTest, BadConstraintsAre400sAndTheServerGoesOn) {
  const Json messages = UserMessages("go");
  auto chat = [&](Json extra) {
    Json body = {{"messages", messages}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return Chat(body);
  };
  ExpectRejected(chat({{"response_format", {{"type", "xml"}}}}), "response_format.type");
  ExpectRejected(chat({{"response_format", "json"}}), "response_format");
  ExpectRejected(chat({{"response_format", {{"type", "json_schema"}}}}), "response_format.json_schema");
  ExpectRejected(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "nonsense"}}}}}}}}),
                 "response_format", "invalid_grammar");
  ExpectRejected(chat({{"guided_json", "{not json"}}), "guided_json");
  ExpectRejected(chat({{"guided_regex", "(unclosed"}}), "guided_regex", "invalid_grammar");
  ExpectRejected(chat({{"structured_outputs", {{"grammar", "root ::= \"a\" undefined_rule"}}}}), "structured_outputs.grammar",
                 "invalid_grammar");
  ExpectRejected(chat({{"guided_choice", Json::array()}}), "guided_choice");
  ExpectRejected(chat({{"guided_choice", {1, 2}}}), "guided_choice");
  ExpectRejected(chat({{"guided_regex", std::string(300 << 10, 'a')}}), "guided_regex");
  ExpectRejected(chat({{"guided_regex", "a+"}, {"guided_json", kSchema}}), "guided_regex");
  ExpectRejected(chat({{"structured_outputs", {{"regex", "a"}, {"choice", {"b"}}}}}), "structured_outputs.choice");
  ExpectRejected(chat({{"structured_outputs", {{"whitespace_pattern", " "}}}}), "structured_outputs");
  ExpectRejected(chat({{"tool_choice", "required"}}), "tool_choice");
  ExpectRejected(chat({{"tools", Tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
                 "tool_choice");
  ExpectRejected(chat({{"tools", Tools()}, {"tool_choice", "always"}}), "tool_choice");
  ExpectRejected(chat({{"tools", Tools()}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}),
                 "tool_choice");
  ExpectRejected(chat({{"tools", Tools()}, {"parallel_tool_calls", "no"}}), "parallel_tool_calls");
  EXPECT_EQ(engine_->num_submitted(), 0);
  ExpectAlive();
}

// Not structured outputs, but the same kind of constraint on what may be generated.
TEST_F(StructuredTest, MinTokensReachesTheEngine) {
  ScriptText("a");
  const EngineRequest r = Accepted(Chat({{"messages", UserMessages("go")}, {"max_tokens", 9}, {"min_tokens", 4}}));
  EXPECT_EQ(r.sampling.min_tokens, 4);
  const EngineRequest c = Accepted(Completion({{"prompt", "x"}, {"max_tokens", 3}, {"min_tokens", 3}}));
  EXPECT_EQ(c.sampling.min_tokens, 3);
  ExpectRejected(Chat({{"messages", UserMessages("go")}, {"max_tokens", 2}, {"min_tokens", 4}}), "min_tokens");
  ExpectRejected(Completion({{"prompt", "x"}, {"min_tokens", -1}}), "min_tokens");
}

}  // namespace
}  // namespace peregrine::server::testing
