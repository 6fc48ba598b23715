// /v1/chat/completions end to end: rendering, streaming vs whole, n, stops, logprobs, tools,
// reasoning, usage.
#include "chat/v4_encoder.h"
#include "server_fixture.h"
#include "tokenizer/utf8.h"

namespace peregrine::server::testing {
namespace {

Json UserMessages(const std::string& text) {
  return Json::array({{{"role", "user"}, {"content", text}}});
}

TEST_F(ServerTest, ChatRendersTheV4PromptAndAnswers) {
  ScriptText("Hello, world!");
  const Json messages = Json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "Say hello"}}});
  ClientResponse r = Chat({{"model", kModel}, {"messages", messages}, {"max_tokens", 50}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Body(r);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], kModel);
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], "Hello, world!");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_TRUE(choice["logprobs"].is_null());

  // The engine saw exactly the reference encoder's prompt, tokenized.
  chat::V4EncodeOptions options;
  auto prompt = chat::EncodeV4Prompt(messages, nullptr, options);
  ASSERT_TRUE(prompt.ok());
  EXPECT_NE(prompt->find("</think>"), std::string::npos);  // chat mode by default
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].prompt_ids, Encode(*prompt));
  EXPECT_EQ(requests[0].max_tokens, 50);

  const int64_t completion = static_cast<int64_t>(Encode("Hello, world!").size()) + 1;  // + EOS
  EXPECT_EQ(body["usage"]["prompt_tokens"], requests[0].prompt_ids.size());
  EXPECT_EQ(body["usage"]["completion_tokens"], completion);
  EXPECT_EQ(body["usage"]["total_tokens"],
            static_cast<int64_t>(requests[0].prompt_ids.size()) + completion);
}

TEST_F(ServerTest, MaxTokensDefaultsToTheRestOfTheContext) {
  ScriptText("x");
  ASSERT_EQ(Chat({{"messages", UserMessages("hi")}}).status, 200);
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].max_tokens, kMaxContext - static_cast<int64_t>(requests[0].prompt_ids.size()));
  ASSERT_EQ(Chat({{"messages", UserMessages("hi")}, {"max_completion_tokens", 7}}).status, 200);
  EXPECT_EQ(engine_->submitted()[1].max_tokens, 7);
}

TEST_F(ServerTest, ChatStreamJoinsToTheWholeResponse) {
  const std::string text = "Streaming works: naïve café, 東京 and 🙂 too.";
  ScriptText(text);
  Json request = {{"messages", UserMessages("go")},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}}};
  ClientResponse r = Chat(request);
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.Header("content-type").find("text/event-stream"), std::string::npos);
  EXPECT_FALSE(r.Header("x-request-id").empty());
  const auto events = SseData(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json first = Json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], Encode(text).size() + 1);
  Json last_choice = Json::parse(events[events.size() - 3]);
  EXPECT_EQ(last_choice["choices"][0]["finish_reason"], "stop");
  for (const std::string& e : events) EXPECT_TRUE(tokenizer::IsValidUtf8(e));
  EXPECT_EQ(StreamedField(r.body, "content"), text);

  request["stream"] = false;
  request.erase("stream_options");
  EXPECT_EQ(Body(Chat(request))["choices"][0]["message"]["content"], text);
}

TEST_F(ServerTest, StreamWithoutIncludeUsageHasNoUsage) {
  ScriptText("abc");
  ClientResponse r = Chat({{"messages", UserMessages("go")}, {"stream", true}});
  for (const std::string& e : SseData(r.body)) {
    if (e == "[DONE]") continue;
    EXPECT_FALSE(Json::parse(e).contains("usage")) << e;
  }
}

TEST_F(ServerTest, ParallelChoicesWithDerivedSeeds) {
  ScriptText("same text");
  ClientResponse r = Chat({{"messages", UserMessages("go")}, {"n", 3}, {"seed", 41},
                           {"temperature", 0.7}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Body(r);
  ASSERT_EQ(body["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["message"]["content"], "same text");
  }
  const auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(requests[i].sampling.seed.has_value());
    EXPECT_EQ(*requests[i].sampling.seed, 41u + i);
    EXPECT_FLOAT_EQ(requests[i].sampling.temperature, 0.7f);
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], 3 * (Encode("same text").size() + 1));

  ClientResponse s = Chat({{"messages", UserMessages("go")}, {"n", 3}, {"stream", true}});
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(StreamedField(s.body, "content", i), "same text");
}

// Builds a text whose tokens split `stop` across a boundary.
TEST_F(ServerTest, StopStringAcrossTokensEndsTheChoiceAndAbortsTheEngine) {
  const std::string text = "The answer is 42. STOP here and more text follows";
  std::vector<int32_t> tokens = Encode(text);
  engine_->SetScript([tokens](const EngineRequest&) {
    FakeScript s;
    s.tokens = tokens;
    s.delay = std::chrono::milliseconds(5);
    s.end = FinishReason::kLength;
    return s;
  });
  // "42. ST" spans several tokens.
  bool spans = true;
  for (int32_t t : tokens) {
    if (tok().Decode(std::vector<int32_t>{t}).find("42. ST") != std::string::npos) spans = false;
  }
  ASSERT_TRUE(spans);
  Json request = {{"messages", UserMessages("go")}, {"stop", {"zzz", "42. ST"}}};
  Json body = Body(Chat(request));
  EXPECT_EQ(body["choices"][0]["message"]["content"], "The answer is ");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 0; }, std::chrono::seconds(2)));
  EXPECT_EQ(engine_->num_aborts(), 1);
  EXPECT_LT(body["usage"]["completion_tokens"].get<size_t>(), tokens.size());

  request["stream"] = true;
  ClientResponse s = Chat(request);
  EXPECT_EQ(StreamedField(s.body, "content"), "The answer is ");
  request["stream"] = false;
  request["include_stop_str_in_output"] = true;
  EXPECT_EQ(Body(Chat(request))["choices"][0]["message"]["content"], "The answer is 42. ST");
  request["stop"] = "STOP";
  request.erase("include_stop_str_in_output");
  EXPECT_EQ(Body(Chat(request))["choices"][0]["message"]["content"], "The answer is 42. ");
}

TEST_F(ServerTest, StopTokenIdsAreNotInTheText) {
  const std::vector<int32_t> hello = Encode("Hello there");
  const std::vector<int32_t> world = Encode(" world");
  std::vector<int32_t> tokens = hello;
  tokens.insert(tokens.end(), world.begin(), world.end());
  engine_->SetScript([tokens](const EngineRequest&) {
    FakeScript s;
    s.tokens = tokens;
    return s;
  });
  Json body = Body(Chat({{"messages", UserMessages("go")}, {"stop_token_ids", {world[0]}}}));
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello there");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["completion_tokens"], hello.size() + 1);
  EXPECT_EQ(engine_->submitted()[0].stop_token_ids, std::vector<int32_t>{world[0]});
}

TEST_F(ServerTest, LengthFinish) {
  ScriptText("one two three four five six");
  Json body = Body(Chat({{"messages", UserMessages("go")}, {"max_tokens", 2}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
}

TEST_F(ServerTest, ChatLogprobsShape) {
  ScriptText("Hi there");
  const size_t num_tokens = Encode("Hi there").size() + 1;
  Json request = {{"messages", UserMessages("go")}, {"logprobs", true}, {"top_logprobs", 2}};
  Json body = Body(Chat(request));
  const Json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), num_tokens);
  for (const Json& entry : content) {
    EXPECT_TRUE(entry["token"].is_string());
    EXPECT_EQ(entry["logprob"], -0.25);
    EXPECT_TRUE(entry["bytes"].is_array());
    ASSERT_EQ(entry["top_logprobs"].size(), 2u);
    EXPECT_TRUE(entry["top_logprobs"][0].contains("bytes"));
  }
  EXPECT_EQ(content[0]["token"], tok().Decode(std::vector<int32_t>{Encode("Hi there")[0]}));
  EXPECT_EQ(engine_->submitted()[0].sampling.logprobs, 2);

  request["stream"] = true;
  size_t streamed = 0;
  for (const std::string& e : SseData(Chat(request).body)) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    const Json& lp = chunk["choices"][0]["logprobs"];
    if (lp.is_object()) streamed += lp["content"].size();
  }
  EXPECT_EQ(streamed, num_tokens);

  // logprobs without top_logprobs: the chosen token only.
  Json plain = Body(Chat({{"messages", UserMessages("go")}, {"logprobs", true}}));
  EXPECT_TRUE(plain["choices"][0]["logprobs"]["content"][0]["top_logprobs"].empty());
  EXPECT_EQ(engine_->submitted().back().sampling.logprobs, 0);
}

const char* kToolCallText =
    "Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

Json WeatherTools() {
  return Json::array({{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "Weather for a city"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}},
                                           {"days", {{"type", "integer"}}}}},
                           {"required", {"city"}}}}}}}});
}

TEST_F(ServerTest, ToolCallsWholeAndStreamed) {
  ScriptText(kToolCallText);
  Json request = {{"messages", UserMessages("Weather in Paris?")}, {"tools", WeatherTools()}};
  ClientResponse r = Chat(request);
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Body(r);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me check.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}, {"days", 3}}));
  // The tools reached the prompt.
  const std::string prompt = tok().Decode(engine_->submitted()[0].prompt_ids);
  EXPECT_NE(prompt.find("get_weather"), std::string::npos);

  request["stream"] = true;
  ClientResponse s = Chat(request);
  std::string name, arguments, finish, id;
  for (const std::string& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    const Json& c = chunk["choices"][0];
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const Json& d : c["delta"]["tool_calls"]) {
      EXPECT_EQ(d["index"], 0);
      if (d.contains("id")) id = d["id"];
      if (d["function"].contains("name")) name += d["function"]["name"].get<std::string>();
      arguments += d["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(Json::parse(arguments), Json({{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(StreamedField(s.body, "content"), "Let me check.");
}

TEST_F(ServerTest, ToolChoiceNoneLeavesTheBlockAsContent) {
  ScriptText(kToolCallText);
  Json body = Body(Chat({{"messages", UserMessages("hi")}, {"tools", WeatherTools()},
                         {"tool_choice", "none"}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(body["choices"][0]["message"]["content"], kToolCallText);
  EXPECT_EQ(tok().Decode(engine_->submitted()[0].prompt_ids).find("get_weather"),
            std::string::npos);
}

TEST_F(ServerTest, ThinkingSplitsReasoningContent) {
  ScriptText("Let me think about it.</think>The answer is 4.");
  Json request = {{"messages", UserMessages("2+2?")},
                  {"chat_template_kwargs", {{"thinking", true}}}};
  Json body = Body(Chat(request));
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "Let me think about it.");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "The answer is 4.");
  const std::string prompt = tok().Decode(engine_->submitted()[0].prompt_ids);
  EXPECT_EQ(prompt.substr(prompt.size() - std::string("<think>").size()), "<think>");

  request["stream"] = true;
  ClientResponse s = Chat(request);
  EXPECT_EQ(StreamedField(s.body, "reasoning_content"), "Let me think about it.");
  EXPECT_EQ(StreamedField(s.body, "content"), "The answer is 4.");

  // Thinking off: the same output is all content, and the prompt closes the think block.
  request = {{"messages", UserMessages("2+2?")}, {"chat_template_kwargs", {{"thinking", false}}}};
  body = Body(Chat(request));
  EXPECT_TRUE(body["choices"][0]["message"]["reasoning_content"].is_null());
  EXPECT_EQ(body["choices"][0]["message"]["content"],
            "Let me think about it.</think>The answer is 4.");
  const std::string chat_prompt = tok().Decode(engine_->submitted().back().prompt_ids);
  EXPECT_EQ(chat_prompt.substr(chat_prompt.size() - std::string("</think>").size()), "</think>");
}

// The DeepSeek API's switch maps onto thinking mode; bad shapes are 400 naming "thinking".
TEST_F(ServerTest, DeepSeekThinkingObject) {
  ScriptText("Let me see.</think>4");
  Json body = Body(Chat({{"messages", UserMessages("2+2?")}, {"thinking", {{"type", "enabled"}}}}));
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "Let me see.");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "4");
  EXPECT_TRUE(tok().Decode(engine_->submitted().back().prompt_ids).ends_with("<think>"));
  body = Body(Chat({{"messages", UserMessages("2+2?")}, {"thinking", {{"type", "disabled"}}},
                    {"reasoning_effort", "max"}}));
  EXPECT_TRUE(body["choices"][0]["message"]["reasoning_content"].is_null());
  EXPECT_TRUE(tok().Decode(engine_->submitted().back().prompt_ids).ends_with("</think>"));
  for (const Json& bad : {Json(true), Json("enabled"), Json::object(), Json({{"type", "on"}}),
                          Json({{"type", 1}})}) {
    ClientResponse r = Chat({{"messages", UserMessages("q")}, {"thinking", bad}});
    ExpectInvalid(r, bad.dump());
    EXPECT_EQ(Body(r)["error"]["param"], "thinking") << bad.dump();
  }
  ClientResponse clash = Chat({{"messages", UserMessages("q")}, {"thinking", {{"type", "enabled"}}},
                               {"chat_template_kwargs", {{"thinking", false}}}});
  ExpectInvalid(clash, "disagreeing switches");
}

// continue_final_message: the assistant's last message is left open and the output goes on
// from it (content stays content in thinking mode once the reasoning was closed).
TEST_F(ServerTest, ContinueFinalMessage) {
  ScriptText(" in the sky");
  const Json messages = Json::array({{{"role", "user"}, {"content", "A haiku?"}},
                                     {{"role", "assistant"}, {"content", "Autumn moon"}}});
  for (bool thinking : {false, true}) {
    Json body = Body(Chat({{"messages", messages}, {"continue_final_message", true},
                           {"chat_template_kwargs", {{"thinking", thinking}}}}));
    EXPECT_EQ(body["choices"][0]["message"]["content"], " in the sky") << thinking;
    EXPECT_TRUE(body["choices"][0]["message"]["reasoning_content"].is_null()) << thinking;
    EXPECT_TRUE(tok().Decode(engine_->submitted().back().prompt_ids).ends_with("Autumn moon"));
  }
  ScriptText(" more.</think>Done");
  const Json thinking_turn = Json::array(
      {{{"role", "user"}, {"content", "q"}},
       {{"role", "assistant"}, {"content", ""}, {"reasoning_content", "Let me think"}}});
  Json body = Body(Chat({{"messages", thinking_turn}, {"continue_final_message", true},
                         {"add_generation_prompt", false}, {"thinking", {{"type", "enabled"}}}}));
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], " more.");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Done");
  EXPECT_TRUE(tok().Decode(engine_->submitted().back().prompt_ids).ends_with("<think>Let me think"));

  const int before = engine_->num_submitted();
  ClientResponse both = Chat({{"messages", messages}, {"continue_final_message", true},
                              {"add_generation_prompt", true}});
  ExpectInvalid(both, "both");
  EXPECT_EQ(Body(both)["error"]["param"], "continue_final_message");
  ClientResponse user_last = Chat({{"messages", UserMessages("hi")}, {"continue_final_message", true}});
  ExpectInvalid(user_last, "user last");
  EXPECT_EQ(Body(user_last)["error"]["param"], "continue_final_message");
  ExpectInvalid(Chat({{"messages", messages}, {"continue_final_message", "yes"}}), "type");
  EXPECT_EQ(engine_->num_submitted(), before);
}

TEST_F(ServerTest, AddGenerationPromptFalseEndsAtTheUserTurn) {
  ScriptText("ok");
  ASSERT_EQ(Chat({{"messages", UserMessages("hi")}, {"add_generation_prompt", false}}).status, 200);
  EXPECT_TRUE(tok().Decode(engine_->submitted().back().prompt_ids).ends_with("hi"));
  ASSERT_EQ(Chat({{"messages", UserMessages("hi")}}).status, 200);
  EXPECT_TRUE(tok().Decode(engine_->submitted().back().prompt_ids).ends_with("<｜Assistant｜></think>"));
}

TEST_F(ServerTest, ReasoningEffortMaxImpliesThinking) {
  ScriptText("hmm</think>ok");
  Json body = Body(Chat({{"messages", UserMessages("q")}, {"reasoning_effort", "max"}}));
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "hmm");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "ok");
}

TEST_F(ServerTest, ContentPartsAreJoined) {
  ScriptText("ok");
  Json messages = Json::array(
      {{{"role", "user"},
        {"content", Json::array({{{"type", "text"}, {"text", "part one"}},
                                 {{"type", "text"}, {"text", "part two"}}})}}});
  ASSERT_EQ(Chat({{"messages", messages}}).status, 200);
  const std::string prompt = tok().Decode(engine_->submitted()[0].prompt_ids);
  EXPECT_NE(prompt.find("part one"), std::string::npos);
  EXPECT_NE(prompt.find("part two"), std::string::npos);
}

// Row 24: characters split across byte tokens, and a cut inside a character at max_tokens.
TEST_F(ServerTest, Utf8SplitAcrossTokensInStreams) {
  // Byte-level tokens: one token per byte.
  std::vector<int32_t> byte_token(256, -1);
  for (int32_t id = 0; id < tok().id_limit(); ++id) {
    const std::string_view b = tok().TokenBytes(id);
    if (b.size() == 1 && byte_token[static_cast<unsigned char>(b[0])] < 0) {
      byte_token[static_cast<unsigned char>(b[0])] = id;
    }
  }
  const std::string text = "héllo 你好 🙂🎉 done";
  std::vector<int32_t> tokens;
  for (unsigned char c : text) {
    ASSERT_GE(byte_token[c], 0);
    tokens.push_back(byte_token[c]);
  }
  for (int64_t max_tokens : {int64_t{1000}, int64_t{12}, int64_t{16}}) {  // cuts inside 好 and 🙂
    engine_->SetScript([tokens](const EngineRequest&) {
      FakeScript s;
      s.tokens = tokens;
      s.tokens_per_event = 1;
      return s;
    });
    Json request = {{"messages", UserMessages("go")}, {"max_tokens", max_tokens}, {"stream", true}};
    ClientResponse s = Chat(request);
    for (const std::string& e : SseData(s.body)) {
      EXPECT_TRUE(tokenizer::IsValidUtf8(e)) << max_tokens;
      EXPECT_EQ(e.find("\\ufffd"), std::string::npos);
    }
    request["stream"] = false;
    const std::string whole = Body(Chat(request))["choices"][0]["message"]["content"];
    EXPECT_EQ(StreamedField(s.body, "content"), whole) << max_tokens;
    if (max_tokens == 1000) {
      EXPECT_EQ(whole, text);
    } else {
      EXPECT_EQ(whole, tok().Decode(std::vector<int32_t>(tokens.begin(), tokens.begin() + max_tokens)));
    }
    const size_t fffd = whole.find("\xEF\xBF\xBD");
    EXPECT_EQ(fffd == std::string::npos, max_tokens == 1000) << whole;
  }
}

TEST_F(ServerTest, ConcurrentRequestsGetIdenticalOutputs) {  // row 35 at the server
  ScriptText("deterministic output for everyone");
  const std::string alone = Body(Chat({{"messages", UserMessages("q")}}))["choices"][0]["message"]["content"];
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(16);
  for (size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      const bool stream = i % 3 == 0;
      ClientResponse r = Chat({{"messages", UserMessages(i % 2 ? "q" : "a longer prompt here")},
                               {"stream", stream}});
      outputs[i] = stream ? StreamedField(r.body, "content")
                          : Body(r)["choices"][0]["message"]["content"].get<std::string>();
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < outputs.size(); ++i) EXPECT_EQ(outputs[i], alone) << i;
}

}  // namespace
}  // namespace peregrine::server::testing
