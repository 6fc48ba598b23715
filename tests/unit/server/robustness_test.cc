// Bad input at the server (design robustness rows 1-3, 5-11, 13-15): every case is a 4xx with
// the OpenAI envelope, nothing reaches the engine, and the server stays alive.
#include <chrono>
#include <thread>

#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

using std::chrono::milliseconds;

const std::string kMessages = R"([{"role":"user","content":"hi"}])";

std::string ChatWith(const std::string& extra) {
  return R"({"messages":)" + kMessages + (extra.empty() ? "" : "," + extra) + "}";
}

class RobustnessTest : public ServerTest {
 protected:
  void ExpectRejected(const std::string& path, const std::string& body, const std::string& why) {
    const int before = engine_->num_submitted();
    ExpectInvalid(PostJson(port_, path, body), why);
    EXPECT_EQ(engine_->num_submitted(), before) << why;
  }
  void ExpectChatRejected(const std::string& extra) {
    ExpectRejected("/v1/chat/completions", ChatWith(extra), extra);
  }
  void ExpectCompletionRejected(const std::string& fields) {
    ExpectRejected("/v1/completions", "{" + fields + "}", fields);
  }
};

TEST_F(RobustnessTest, Row1MalformedJsonAndWrongTypes) {
  for (const std::string& body :
       {std::string(R"({"messages": [)"), std::string("{"), std::string("not json"),
        std::string(""), std::string("[]"), std::string("null"), std::string(R"({"messages":[}])"),
        std::string(R"({"messages":[{"role":"user","content":"hi"}],})"),
        std::string(256, '[')}) {
    ExpectRejected("/v1/chat/completions", body, body.substr(0, 40));
  }
  for (const std::string extra :
       {R"("max_tokens":"abc")", R"("max_tokens":1.5)", R"("max_tokens":true)",
        R"("temperature":"hot")", R"("stream":"yes")", R"("n":[1])", R"("stop":5)",
        R"("stop":[1,2])", R"("logprobs":1)", R"("tools":{})", R"("tool_choice":"required")",
        R"("tool_choice":{"type":"function","function":{"name":"f"}})", R"("model":5)",
        R"("seed":"1")", R"("logit_bias":[1])", R"("stream_options":{"include_usage":true})",
        R"("response_format":{"type":"xml"})", R"("chat_template":"{{x}}")",
        R"("chat_template_kwargs":{"thinking":"yes"})", R"("chat_template_kwargs":[])",
        R"("reasoning_effort":"extreme")", R"("top_logprobs":3)", R"("min_tokens":-1)",
        R"("prompt_logprobs":-1)", R"("allowed_token_ids":[1])", R"("best_of":4)"}) {
    ExpectChatRejected(extra);
  }
  for (const std::string messages :
       {R"("messages":"hi")", R"("messages":[{"role":5,"content":"x"}])",
        R"("messages":[{"role":"wizard","content":"x"}])", R"("messages":[7])",
        R"("messages":[{"role":"user","content":5}])",
        R"("messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://169.254.169.254/"}}]}])",
        R"("messages":[{"role":"user","content":[{"type":"text"}]}])"}) {
    ExpectRejected("/v1/chat/completions", "{" + messages + "}", messages);
  }
  // The envelope for a wrong type names the parameter and never echoes the value.
  Json body = Body(PostJson(port_, "/v1/chat/completions", ChatWith(R"("max_tokens":"SECRET")")));
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_EQ(body.dump().find("SECRET"), std::string::npos);
  ExpectAlive();
}

// Every 4xx names its kind in a string "code" (never null), stable across messages.
TEST_F(RobustnessTest, ErrorCodesAreStableStrings) {
  const std::pair<std::string, std::string> cases[] = {
      {"{}", "missing_field"},
      {"{", "invalid_json"},
      {"[1]", "invalid_json"},
      {"{\"messages\":\"\xff\"}", "invalid_encoding"},
      {ChatWith(R"("max_tokens":"abc")"), "invalid_type"},
      {ChatWith(R"("temperature":9)"), "invalid_value"},
      {ChatWith(R"("use_beam_search":true)"), "unsupported_parameter"},
      {ChatWith(R"("stop_token_ids":[-1])"), "invalid_token_id"},
      {ChatWith(R"("max_tokens":100000)"), "context_length_exceeded"},
      {ChatWith(R"("model":"gpt-9")"), "model_not_found"},
  };
  for (const auto& [body, code] : cases) {
    EXPECT_EQ(Body(PostJson(port_, "/v1/chat/completions", body))["error"]["code"], code) << body;
  }
  EXPECT_EQ(Body(PostJson(port_, "/v1/completions", R"({"prompt":[-1]})"))["error"]["code"],
            "invalid_token_id");
  EXPECT_EQ(Body(Fetch(port_, "GET", "/v1/nothing"))["error"]["code"], "not_found");
  EXPECT_EQ(Body(Fetch(port_, "GET", "/v1/completions"))["error"]["code"], "method_not_allowed");
}

TEST_F(RobustnessTest, UnknownModelIs404) {
  ClientResponse r = PostJson(port_, "/v1/chat/completions", ChatWith(R"("model":"gpt-9")"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Body(r)["error"]["code"], "model_not_found");
  EXPECT_EQ(r.body.find("gpt-9"), std::string::npos);
}

TEST_F(RobustnessTest, Row2InvalidUtf8AndLoneSurrogates) {
  ExpectRejected("/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff\xfe bytes\"}]}", "0xff");
  ExpectRejected("/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", "utf-8 surrogate");
  ExpectRejected("/v1/chat/completions", R"({"messages":[{"role":"user","content":"\ud800"}]})",
                 "lone high surrogate");
  ExpectRejected("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x\udc00y"}]})",
                 "lone low surrogate");
  // "你好" in GBK.
  ExpectRejected("/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc4\xe3\xba\xc3\"}]}", "gbk");
  ExpectRejected("/v1/completions", "{\"prompt\":\"\xc0\xaf\"}", "overlong");
  // A valid surrogate pair is fine.
  ScriptText("ok");
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"\ud83d\ude42"}]})").status, 200);
  ExpectAlive();
}

TEST_F(RobustnessTest, Row3HugeBodyGets413BeforeItIsRead) {
  RawConnection c(port_);
  const size_t announced = size_t{200} << 20;
  ASSERT_TRUE(c.Write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: " + std::to_string(announced) + "\r\n\r\n"));
  c.Write(std::string(1 << 20, 'x'));  // the server may already have stopped reading
  const std::string response = c.ReadUntil("\r\n\r\n", milliseconds(3000));
  EXPECT_EQ(response.rfind("HTTP/1.1 413", 0), 0u) << response.substr(0, 100);
  EXPECT_NE(response.find("x-request-id: "), std::string::npos);
  // A chunked body that grows past the limit.
  RawConnection chunked(port_);
  chunked.Write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string piece(1 << 20, 'y');
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", piece.size());
  std::string reply;
  for (int i = 0; i < 12 && reply.empty(); ++i) {
    if (!chunked.Write(std::string(size) + piece + "\r\n")) break;
    reply = chunked.Read(milliseconds(50));
  }
  if (reply.empty()) reply = chunked.ReadUntil("\r\n\r\n", milliseconds(2000));
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply.substr(0, 100);
  ExpectAlive();
}

TEST_F(RobustnessTest, Row3HugeHeadersGet431) {
  {
    RawConnection c(port_);
    c.Write("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(1 << 20, 'a') + "\r\n\r\n");
    const std::string r = c.ReadUntil("\r\n\r\n", milliseconds(3000));
    EXPECT_EQ(r.rfind("HTTP/1.1 431", 0), 0u) << r.substr(0, 100);
  }
  {
    RawConnection c(port_);
    std::string request = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 10000; ++i) {
      request += 'h';
      request += std::to_string(i);
      request += ": v\r\n";
    }
    request += "\r\n";
    c.Write(request);
    const std::string r = c.ReadUntil("\r\n\r\n", milliseconds(3000));
    EXPECT_EQ(r.rfind("HTTP/1.1 431", 0), 0u) << r.substr(0, 100);
  }
  {
    RawConnection c(port_);
    c.Write("GARBAGE\r\n\r\n");
    EXPECT_EQ(c.ReadUntil("\r\n\r\n", milliseconds(3000)).rfind("HTTP/1.1 400", 0), 0u);
  }
  ExpectAlive();
}

// Framing that two parsers could read differently is refused and the connection closed, so
// a request hidden in the body is never answered (request smuggling).
TEST_F(RobustnessTest, AmbiguousFramingIsRefusedAndClosed) {
  const std::string hidden = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string chunked_then_hidden = "0\r\n\r\n" + hidden;
  struct Case {
    std::string fields;
    std::string body;
    const char* status;
  };
  const Case cases[] = {
      {"Transfer-Encoding: gzip, chunked\r\n", chunked_then_hidden, "501"},
      {"Transfer-Encoding: identity\r\n", hidden, "400"},
      {"Transfer-Encoding: chunked, chunked\r\n", chunked_then_hidden, "400"},
      {"Transfer-Encoding: identity\r\nContent-Length: " + std::to_string(hidden.size()) + "\r\n",
       hidden, "400"},
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunked_then_hidden, "400"},
      {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", chunked_then_hidden, "400"},
  };
  for (const Case& c : cases) {
    RawConnection conn(port_);
    conn.Write("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + c.fields + "\r\n" + c.body);
    const std::string reply = conn.Read(milliseconds(1500));
    EXPECT_EQ(reply.rfind(std::string("HTTP/1.1 ") + c.status, 0), 0u) << c.fields << reply;
    EXPECT_NE(reply.find("connection: close"), std::string::npos) << c.fields;
    EXPECT_NE(reply.find("\"code\":\""), std::string::npos) << c.fields;
    EXPECT_EQ(reply.find("\"object\":\"list\""), std::string::npos) << c.fields;
    EXPECT_EQ(reply.find("HTTP/1.1", 1), std::string::npos) << "a second response: " << reply;
    EXPECT_TRUE(conn.WaitClosed(milliseconds(3000))) << c.fields;
  }
  ExpectAlive();
}

// A body that arrives too slowly gets 408 (not a silent close), and others are still served.
TEST_F(RobustnessTest, TrickledBodyGets408) {
  ServerConfig config = TestConfig();
  config.timeouts.body = milliseconds(400);
  Restart(config);
  RawConnection c(port_);
  c.Write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess");
  std::string reply;
  for (int i = 0; i < 10 && reply.empty(); ++i) {
    c.Write("a");
    reply = c.Read(milliseconds(100));
  }
  if (reply.empty()) reply = c.ReadUntil("}}", milliseconds(2000));
  EXPECT_EQ(reply.rfind("HTTP/1.1 408", 0), 0u) << reply;
  EXPECT_NE(reply.find("\"code\":\"request_timeout\""), std::string::npos) << reply;
  EXPECT_NE(reply.find("connection: close"), std::string::npos);
  EXPECT_TRUE(c.WaitClosed(milliseconds(3000)));
  ExpectAlive();
  ScriptText("ok");
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions", ChatWith("")).status, 200);
}

// Row 4: one header byte at a time is closed at the header timeout (1 s in tests) while other
// clients are served promptly; an idle keep-alive connection is closed at the idle timeout.
TEST_F(RobustnessTest, Row4SlowlorisIsClosedWhileOthersAreServed) {
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<RawConnection>(port_));
    slow.back()->Write("P");
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> latencies;
  std::thread trickle([&] {
    for (int step = 0; step < 8; ++step) {
      std::this_thread::sleep_for(milliseconds(200));
      for (auto& c : slow) c->Write("O");
    }
  });
  while (std::chrono::steady_clock::now() - start < milliseconds(1200)) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
    latencies.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  trickle.join();
  for (auto& c : slow) EXPECT_TRUE(c->WaitClosed(milliseconds(1500)));
  std::sort(latencies.begin(), latencies.end());
  EXPECT_LT(latencies[latencies.size() * 99 / 100], 0.5);  // generous: a shared 2-core box

  ServerConfig config = TestConfig();
  config.timeouts.idle = milliseconds(300);
  Restart(config);
  HttpClient idle(port_);
  EXPECT_EQ(idle.Send("GET", "/health").status, 200);
  RawConnection silent(port_);
  EXPECT_TRUE(silent.WaitClosed(milliseconds(2000)));
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(idle.Send("GET", "/health").status, 0);  // closed by the server meanwhile
}

TEST_F(RobustnessTest, Row5EmptyInputs) {
  ExpectRejected("/v1/chat/completions", R"({"messages":[]})", "no messages");
  ExpectRejected("/v1/chat/completions", R"({})", "missing messages");
  ExpectRejected("/v1/chat/completions", R"({"messages":[{"content":""}]})", "no role");
  ExpectRejected("/v1/chat/completions", R"({"messages":[{}]})", "empty message");
  ExpectCompletionRejected(R"("prompt":"")");
  ExpectCompletionRejected(R"("prompt":[])");
  ExpectCompletionRejected(R"("prompt":[[]])");
  ExpectCompletionRejected(R"("prompt":["a",""])");
  ExpectCompletionRejected(R"("max_tokens":3)");
}

TEST_F(RobustnessTest, Row6BadTokenIds) {
  for (const std::string prompt : {"[-1]", "[129280]", "[4294967295]", "[1, \"a\"]", "[\"a\", 1]",
                                    "[1.5]", "[[1],[-3]]", "[[1], 2]", "[true]", "[18446744073709551616]"}) {
    ExpectCompletionRejected(R"("prompt":)" + prompt);
  }
  // The vocabulary gap: ids the tokenizer knows but the model does not.
  FakeEngine small(129000, kMaxContext);
  Server server(TestConfig(), small, tok());
  ASSERT_TRUE(server.Start().ok());
  ExpectInvalid(PostJson(server.port(), "/v1/completions", R"({"prompt":[129100]})"), "gap id");
  ExpectInvalid(PostJson(server.port(), "/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"look <｜image｜>"}]})"),
                "gap token in text");
  ExpectInvalid(PostJson(server.port(), "/v1/chat/completions", ChatWith(R"("stop_token_ids":[129100])")),
                "gap stop id");
  EXPECT_EQ(small.num_submitted(), 0);
}

TEST_F(RobustnessTest, Row7LogitBiasAbuse) {
  for (const std::string bias : {R"({"129280":1})", R"({"-1":1})", R"({"abc":1})", R"({"1.5":1})",
                                  R"({"5":101})", R"({"5":"x"})", R"({"5":1e400})", R"({"":1})",
                                  R"({"99999999999999999999":1})"}) {
    ExpectChatRejected(R"("logit_bias":)" + bias);
  }
  std::string big = "{";
  for (int i = 0; i < 100000; ++i) big += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  big += "}";
  ExpectChatRejected(R"("logit_bias":)" + big);
  ScriptText("ok");
  ASSERT_EQ(PostJson(port_, "/v1/chat/completions", ChatWith(R"("logit_bias":{"5":-100,"7":2.5})")).status, 200);
  const auto sent = engine_->submitted().back().sampling.logit_bias;
  ASSERT_EQ(sent.size(), 2u);
}

TEST_F(RobustnessTest, Row8StopTokenIds) {
  ExpectChatRejected(R"("stop_token_ids":[129280])");
  ExpectChatRejected(R"("stop_token_ids":[-1])");
  ExpectChatRejected(R"("stop_token_ids":"1")");
  std::string many = "1";
  for (int i = 0; i < 300; ++i) many += ",1";
  ExpectChatRejected(R"("stop_token_ids":[)" + many + "]");
}

TEST_F(RobustnessTest, Row9ChoiceCountAbuse) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string n : {R"("n":1000000)", R"("n":0)", R"("n":-1)", R"("n":17)",
                               R"("n":1e300)", R"("best_of":1000000)", R"("n":2.5)"}) {
    ExpectChatRejected(n);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ExpectCompletionRejected(R"("prompt":["a","b","c","d","e"],"n":16)");
  ExpectAlive();
}

TEST_F(RobustnessTest, Row10MaxTokens) {
  ExpectChatRejected(R"("max_tokens":-1)");
  ExpectChatRejected(R"("max_tokens":0)");
  ExpectCompletionRejected(R"("prompt":"hi","max_tokens":0)");
  ExpectCompletionRejected(R"("prompt":"hi","max_tokens":-5)");
  ClientResponse r = PostJson(port_, "/v1/chat/completions", ChatWith(R"("max_tokens":2147483648)"));
  ExpectInvalid(r, "2^31");
  EXPECT_EQ(Body(r)["error"]["code"], "context_length_exceeded");
  EXPECT_NE(Body(r)["error"]["message"].get<std::string>().find("4096"), std::string::npos);
  ExpectChatRejected(R"("max_tokens":9223372036854775807)");
  ExpectChatRejected(R"("max_tokens":18446744073709551615)");
  ExpectChatRejected(R"("max_completion_tokens":-3)");
}

// Row 11: the >= rule at admission, with token counts in the message.
TEST_F(RobustnessTest, Row11PromptAtAndOverTheContext) {
  ScriptText("x");
  std::vector<int32_t> ids(kMaxContext, 100);
  ClientResponse at = Completion({{"prompt", ids}, {"max_tokens", 1}});
  ExpectInvalid(at, "exactly n_ctx");
  EXPECT_EQ(Body(at)["error"]["code"], "context_length_exceeded");
  EXPECT_NE(Body(at)["error"]["message"].get<std::string>().find(std::to_string(kMaxContext)),
            std::string::npos);
  ids.push_back(100);
  ExpectInvalid(Completion({{"prompt", ids}, {"max_tokens", 1}}), "n_ctx + 1");
  ids.resize(kMaxContext - 1);
  EXPECT_EQ(Completion({{"prompt", ids}, {"max_tokens", 1}}).status, 200);
  ExpectInvalid(Completion({{"prompt", ids}, {"max_tokens", 2}}), "one over");
  // Chat: a prompt longer than the context.
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "word ";
  ClientResponse chat = Chat({{"messages", {{{"role", "user"}, {"content", text}}}}});
  ExpectInvalid(chat, "long chat");
  EXPECT_EQ(Body(chat)["error"]["code"], "context_length_exceeded");
}

TEST_F(RobustnessTest, Row12EngineRefusalIs400) {
  engine_->SetScript([](const EngineRequest&) {
    FakeScript s;
    s.submit_status = InvalidArgument("request needs more KV than the pool holds");
    return s;
  });
  ExpectInvalid(PostJson(port_, "/v1/chat/completions", ChatWith("")), "engine refusal");
  ExpectAlive();
}

TEST_F(RobustnessTest, Row13And14SamplingRanges) {
  for (const std::string extra :
       {R"("top_logprobs":21,"logprobs":true)", R"("top_logprobs":-1,"logprobs":true)",
        R"("temperature":-1)", R"("temperature":1e9)", R"("temperature":"NaN")",
        R"("temperature":1e400)", R"("top_p":0)", R"("top_p":1.5)", R"("top_k":-5)",
        R"("min_p":2)", R"("presence_penalty":1e30)", R"("frequency_penalty":-1e30)",
        R"("repetition_penalty":0)", R"("repetition_penalty":1e30)",
        R"("seed":18446744073709551616)", R"("seed":18446744073709551615)", R"("seed":1.5)"}) {
    ExpectChatRejected(extra);
  }
  ExpectCompletionRejected(R"("prompt":"x","logprobs":21)");
  ScriptText("ok");
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions",
                     ChatWith(R"("temperature":0,"top_p":1,"top_k":-1,"seed":-7,"min_p":0.1)")).status,
            200);
}

TEST_F(RobustnessTest, Row15StopAbuse) {
  std::string many = "[";
  for (int i = 0; i < 10000; ++i) many += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  many += "]";
  ExpectChatRejected(R"("stop":)" + many);
  ExpectChatRejected(R"("stop":")" + std::string(1 << 20, 'a') + "\"");
  ExpectChatRejected(R"("tools":[)" + [] {
    std::string t;
    for (int i = 0; i < 200; ++i) t += (i ? "," : "") + std::string(R"({"type":"function","function":{"name":"f"}})");
    return t;
  }() + "]");
  ExpectChatRejected(R"("tools":[{"type":"function","function":{}}])");
  ExpectChatRejected(R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])");
  ExpectAlive();
}

// One object of 150,000 keys parses in linear time on a worker; other connections are served
// meanwhile (the I/O threads never parse).
TEST_F(RobustnessTest, ManyKeysInOneObjectParseQuickly) {
  ScriptText("ok");
  std::string body = R"({"messages":)" + kMessages;
  for (int i = 0; i < 150000; ++i) body += ",\"x" + std::to_string(i) + "\":" + std::to_string(i);
  body += "}";
  const auto t0 = std::chrono::steady_clock::now();
  std::thread big([&] { EXPECT_EQ(PostJson(port_, "/v1/chat/completions", body).status, 200); });
  double worst_health = 0;
  for (int i = 0; i < 10; ++i) {
    const auto h0 = std::chrono::steady_clock::now();
    ExpectAlive();
    worst_health = std::max(
        worst_health, std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count());
  }
  big.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_LT(worst_health, 0.5);
}

TEST_F(RobustnessTest, ServerSurvivesARandomBarrage) {
  ScriptText("fine");
  const std::string samples[] = {
      ChatWith(""), "{\"messages\":", "\x00\x01\x02", R"({"messages":[{"role":"user","content":null}]})",
      R"({"prompt":[[[[1]]]]})", std::string(100, '{'), R"({"messages":[{"role":"assistant","tool_calls":5}]})",
      R"({"messages":[{"role":"tool","content":"x","tool_call_id":7}]})"};
  for (int round = 0; round < 3; ++round) {
    for (const std::string& s : samples) {
      const int status = PostJson(port_, "/v1/chat/completions", s).status;
      EXPECT_TRUE(status == 200 || status == 400) << s;
      EXPECT_NE(PostJson(port_, "/v1/completions", s).status, 0);
    }
  }
  ExpectAlive();
}

}  // namespace
}  // namespace peregrine::server::testing
