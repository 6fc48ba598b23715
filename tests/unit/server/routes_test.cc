// Routes, request ids and authentication (the metrics exposition: metrics_test.cc).
#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

TEST_F(ServerTest, HealthReadyModels) {
  ClientResponse health = Fetch(port_, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_FALSE(health.Header("x-request-id").empty());

  ClientResponse ready = Fetch(port_, "GET", "/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(Body(ready)["status"], "ready");

  ClientResponse models = Fetch(port_, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  Json body = Body(models);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], kModel);
  EXPECT_EQ(body["data"][0]["max_model_len"], kMaxContext);
}

TEST_F(ServerTest, ReadyFollowsTheEngine) {
  EngineStats stats;
  stats.is_ready = false;
  engine_->SetStats(stats);
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 503);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);  // liveness is not readiness
  ClientResponse r = Chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(r.Header("retry-after").empty());
}

TEST_F(ServerTest, UnknownRouteAndWrongMethod) {
  ClientResponse r = Fetch(port_, "GET", "/v1/nothing");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(Body(r)["error"].is_object());
  r = Fetch(port_, "POST", "/health", "{}");
  EXPECT_EQ(r.status, 405);
  r = Fetch(port_, "GET", "/v1/chat/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("allow"), "POST");
  ExpectAlive();
}

TEST_F(ServerTest, RequestIdIsEchoedWhenSafe) {
  EXPECT_EQ(Fetch(port_, "GET", "/health", {}, {{"x-request-id", "abc-123_x.y:z"}})
                .Header("x-request-id"),
            "abc-123_x.y:z");
  const std::string generated =
      Fetch(port_, "GET", "/health", {}, {{"x-request-id", "bad id\twith\x01"}}).Header("x-request-id");
  EXPECT_FALSE(generated.empty());
  EXPECT_EQ(generated.find(' '), std::string::npos);
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  ScriptText("ok");
  HttpClient client(port_);
  for (int i = 0; i < 20; ++i) {
    ClientResponse r = client.Send("POST", "/v1/chat/completions",
                                   R"({"messages":[{"role":"user","content":"hi"}]})");
    ASSERT_EQ(r.status, 200) << i;
    EXPECT_EQ(Body(r)["choices"][0]["message"]["content"], "ok");
  }
  EXPECT_TRUE(client.is_open());
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  ScriptText("ok");
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}]})";
  RawConnection c(port_);
  c.Write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
          std::to_string(chat.size()) + "\r\n\r\n" + chat +
          "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string all = c.ReadUntil("\"object\":\"list\"", std::chrono::milliseconds(3000));
  const size_t first = all.find("HTTP/1.1 200");
  const size_t second = all.find("chat.completion");
  const size_t third = all.find("\"object\":\"list\"");
  EXPECT_NE(first, std::string::npos);
  EXPECT_NE(second, std::string::npos);
  EXPECT_NE(third, std::string::npos);
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
}

TEST_F(ServerTest, Http10AndExpectContinue) {
  {
    RawConnection c(port_);
    c.Write("GET /health HTTP/1.0\r\n\r\n");
    const std::string r = c.ReadUntil("\r\n\r\n", std::chrono::milliseconds(2000));
    EXPECT_EQ(r.rfind("HTTP/1.0 200", 0), 0u) << r;
    EXPECT_TRUE(c.WaitClosed(std::chrono::milliseconds(2000)));
  }
  {
    ScriptText("streamed over 1.0");
    const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"stream":true})";
    RawConnection c(port_);
    c.Write("POST /v1/chat/completions HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n\r\n" + body);
    const std::string r = c.ReadUntil("data: [DONE]", std::chrono::milliseconds(2000));
    EXPECT_EQ(r.find("transfer-encoding"), std::string::npos);
    EXPECT_EQ(StreamedField(r.substr(r.find("\r\n\r\n") + 4), "content"), "streamed over 1.0");
    EXPECT_TRUE(c.WaitClosed(std::chrono::milliseconds(2000)));
  }
  {
    ScriptText("ok");
    const std::string body = R"({"messages":[{"role":"user","content":"hi"}]})";
    RawConnection c(port_);
    c.Write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n");
    EXPECT_EQ(c.ReadUntil("\r\n\r\n", std::chrono::milliseconds(2000)), "HTTP/1.1 100 Continue\r\n\r\n");
    c.Write(body);
    EXPECT_NE(c.ReadUntil("chat.completion", std::chrono::milliseconds(2000)).find("HTTP/1.1 200"),
              std::string::npos);
  }
}

TEST_F(ServerTest, SkipSpecialTokens) {
  std::vector<int32_t> tokens = Encode("a");
  tokens.push_back(0);  // BOS: special
  const std::vector<int32_t> b = Encode("b");
  tokens.insert(tokens.end(), b.begin(), b.end());
  engine_->SetScript([tokens](const EngineRequest&) {
    FakeScript s;
    s.tokens = tokens;
    return s;
  });
  const Json messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(Body(Chat({{"messages", messages}}))["choices"][0]["message"]["content"], "ab");
  EXPECT_EQ(Body(Chat({{"messages", messages}, {"skip_special_tokens", false}}))["choices"][0]
                ["message"]["content"],
            "a<｜begin▁of▁sentence｜>b");
}

// Row 32: every route but /health, /ready and /metrics needs the key; the scheme is
// case-insensitive.
TEST_F(ServerTest, ApiKeyOnEveryRoute) {
  ServerConfig config = TestConfig();
  config.api_key = "sk-test-key";
  Restart(config);
  ScriptText("fine");
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}]})";
  const std::string completion = R"({"prompt":"hi","max_tokens":2})";
  struct Route {
    const char* method;
    const char* path;
    std::string body;
  };
  const Route protected_routes[] = {{"POST", "/v1/chat/completions", chat},
                                    {"POST", "/v1/completions", completion},
                                    {"GET", "/v1/models", ""},
                                    {"GET", "/v1/unknown", ""},
                                    {"POST", "/tokenize", "{}"}};
  for (const Route& route : protected_routes) {
    for (const Headers& bad : {Headers{}, Headers{{"authorization", "Bearer wrong"}},
                               Headers{{"authorization", "Basic sk-test-key"}},
                               Headers{{"authorization", "Bearer  sk-test-key"}},
                               Headers{{"authorization", "sk-test-key"}},
                               Headers{{"authorization", "Bearer sk-test-ke"}},
                               Headers{{"authorization", "Bearer sk-test-key2"}}}) {
      ClientResponse r = Fetch(port_, route.method, route.path, route.body, bad);
      EXPECT_EQ(r.status, 401) << route.path;
      Json body = Body(r);
      EXPECT_EQ(body["error"]["code"], "invalid_api_key") << route.path;
      EXPECT_EQ(body["error"]["type"], "invalid_request_error") << route.path;
      EXPECT_FALSE(r.Header("x-request-id").empty());
    }
  }
  for (const char* scheme : {"Bearer", "bearer", "BEARER"}) {
    const Headers good = {{"authorization", std::string(scheme) + " sk-test-key"}};
    EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", chat, good).status, 200) << scheme;
    EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", completion, good).status, 200) << scheme;
    EXPECT_EQ(Fetch(port_, "GET", "/v1/models", {}, good).status, 200) << scheme;
  }
  // Public: probes, and /metrics (as in vLLM: a scrape needs no secret).
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/metrics").status, 200);
}

}  // namespace
}  // namespace peregrine::server::testing
