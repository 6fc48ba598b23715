// Routes, request ids and authentication (the metrics exposition: metrics_test.cc).
#include <map>
#include <sstream>

#include "base/version.h"
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

TEST_F(ServerTest, VersionAndOneModel) {
  ClientResponse version = Fetch(port_, "GET", "/version");
  ASSERT_EQ(version.status, 200);
  EXPECT_EQ(Body(version)["version"], std::string(kVersion));
  EXPECT_EQ(Fetch(port_, "POST", "/version", "{}").status, 405);

  ClientResponse model = Fetch(port_, "GET", std::string("/v1/models/") + kModel);
  ASSERT_EQ(model.status, 200);
  Json listed = Body(Fetch(port_, "GET", "/v1/models"))["data"][0];
  Json one = Body(model);
  listed.erase("created");
  one.erase("created");
  EXPECT_EQ(one, listed);
  ClientResponse unknown = Fetch(port_, "GET", "/v1/models/gpt-9");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Body(unknown)["error"]["code"], "model_not_found");
  EXPECT_EQ(Body(unknown)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(unknown.body.find("gpt-9"), std::string::npos);
  EXPECT_EQ(Fetch(port_, "DELETE", std::string("/v1/models/") + kModel).status, 405);

  ServerConfig config = TestConfig();
  config.model_name = "org/name";
  Restart(config);
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models/org/name").status, 200);
  EXPECT_EQ(Body(Fetch(port_, "GET", "/v1/models/org%2Fname"))["id"], "org/name");
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models/org%2").status, 404);
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

// HEAD: GET's status and headers (Content-Length of GET's body), no body; the connection
// stays usable, so the next response starts right after the head.
TEST_F(ServerTest, HeadGetsHeadersWithoutABody) {
  for (const char* path : {"/health", "/ready", "/v1/models", "/version", "/v1/nothing"}) {
    const ClientResponse get = Fetch(port_, "GET", path);
    RawConnection c(port_);
    c.Write(std::string("HEAD ") + path + " HTTP/1.1\r\nHost: x\r\n\r\n"
            "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string all = c.Read(std::chrono::milliseconds(2000));  // until the close
    const size_t end = all.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << path << all;
    const std::string head = all.substr(0, end);
    EXPECT_EQ(head.rfind("HTTP/1.1 " + std::to_string(get.status), 0), 0u) << path << head;
    EXPECT_NE(head.find("content-length: " + std::to_string(get.body.size())), std::string::npos)
        << path << head;
    EXPECT_EQ(all.find("HTTP/1.1 200", end), end + 4) << path << all;
  }
  RawConnection post_only(port_);
  post_only.Write("HEAD /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string refused = post_only.Read(std::chrono::milliseconds(2000));
  EXPECT_EQ(refused.rfind("HTTP/1.1 405", 0), 0u) << refused;
  EXPECT_EQ(refused.size(), refused.find("\r\n\r\n") + 4) << refused;
  EXPECT_EQ(Fetch(port_, "POST", "/health", "{}").Header("allow"), "GET, HEAD");
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
