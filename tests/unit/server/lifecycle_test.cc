// Request lifecycles under faults: client disconnects (row 25), overload (row 26), engine
// errors, graceful drain (row 31), and many concurrent streams.
#include <atomic>
#include <chrono>
#include <thread>

#include "server_fixture.h"
#include "tokenizer/utf8.h"

namespace peregrine::server::testing {
namespace {

using std::chrono::milliseconds;

std::string RawPost(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

const std::string kStreamChat =
    R"({"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":1000})";
const std::string kChat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1000})";

class LifecycleTest : public ServerTest {
 protected:
  // Every request emits `num` tokens, one every `delay`.
  void ScriptSlow(int num, milliseconds delay, milliseconds first_delay = milliseconds(0)) {
    const std::vector<int32_t> word = Encode(" word");
    engine_->SetScript([=](const EngineRequest&) {
      FakeScript s;
      s.tokens.assign(static_cast<size_t>(num), word[0]);
      s.delay = delay;
      s.first_delay = first_delay;
      return s;
    });
  }
  bool WaitAborts(int n) {
    return engine_->WaitFor([&] { return engine_->num_aborts() >= n && engine_->num_live() == 0; },
                            milliseconds(2000));
  }
  bool WaitNoJobs() {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
    while (server_->num_live_jobs() != 0 || server_->num_active_exchanges() != 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return true;
  }
};

TEST_F(LifecycleTest, Row25DisconnectMidStreamAborts) {
  ScriptSlow(1000, milliseconds(10));
  RawConnection c(port_);
  c.Write(RawPost("/v1/chat/completions", kStreamChat));
  const std::string head = c.ReadUntil("word", milliseconds(2000));
  ASSERT_NE(head.find("200 OK"), std::string::npos);
  c.Close();
  EXPECT_TRUE(WaitAborts(1));
  EXPECT_EQ(engine_->num_aborts(), 1);
  EXPECT_TRUE(WaitNoJobs());
  ExpectAlive();
}

TEST_F(LifecycleTest, Row25DisconnectDuringWholeRequestAborts) {
  ScriptSlow(1000, milliseconds(10));
  RawConnection c(port_);
  c.Write(RawPost("/v1/chat/completions", kChat));
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 1; }, milliseconds(2000)));
  std::this_thread::sleep_for(milliseconds(50));
  c.Close();
  EXPECT_TRUE(WaitAborts(1));
  EXPECT_TRUE(WaitNoJobs());
}

TEST_F(LifecycleTest, Row25DisconnectMidPrefillAborts) {
  ScriptSlow(5, milliseconds(10), /*first_delay=*/milliseconds(5000));
  RawConnection c(port_);
  c.Write(RawPost("/v1/chat/completions", kStreamChat));
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 1; }, milliseconds(2000)));
  c.Close();
  EXPECT_TRUE(WaitAborts(1));
  EXPECT_TRUE(WaitNoJobs());
}

TEST_F(LifecycleTest, Row25DisconnectAbortsEveryChoice) {
  ScriptSlow(1000, milliseconds(10));
  RawConnection c(port_);
  c.Write(RawPost("/v1/completions", R"({"prompt":["a","b"],"n":3,"stream":true,"max_tokens":900})"));
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 6; }, milliseconds(2000)));
  c.ReadUntil("word", milliseconds(2000));
  c.Close();
  EXPECT_TRUE(WaitAborts(6));
  EXPECT_TRUE(WaitNoJobs());
}

TEST_F(LifecycleTest, Row26AdmissionCapGives429BeforeParsing) {
  ServerConfig config = TestConfig();
  config.limits.max_concurrent_requests = 2;
  Restart(config);
  ScriptSlow(50, milliseconds(10));
  RawConnection a(port_), b(port_);
  a.Write(RawPost("/v1/chat/completions", kStreamChat));
  b.Write(RawPost("/v1/chat/completions", kStreamChat));
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 2; }, milliseconds(2000)));
  // Not even valid JSON: the rejection comes before the body is looked at.
  ClientResponse r = PostJson(port_, "/v1/chat/completions", "{not json");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.Header("retry-after"), "1");
  EXPECT_EQ(Body(r)["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(engine_->num_submitted(), 2);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  a.ReadUntil("[DONE]", milliseconds(3000));
  b.ReadUntil("[DONE]", milliseconds(3000));
  EXPECT_TRUE(WaitNoJobs());
  ScriptText("ok");
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions", kChat).status, 200);
}

TEST_F(LifecycleTest, Row26EngineQueueFullGives429) {
  engine_->SetScript([](const EngineRequest&) {
    FakeScript s;
    s.submit_status = ResourceExhausted("waiting queue full");
    return s;
  });
  ClientResponse r = PostJson(port_, "/v1/chat/completions", kStreamChat);
  EXPECT_EQ(r.status, 429);  // still a plain error: the stream had not started
  EXPECT_FALSE(r.Header("retry-after").empty());

  // The engine's waiting queue checked before rendering.
  ServerConfig config = TestConfig();
  config.limits.max_waiting_requests = 4;
  Restart(config);
  EngineStats stats;
  stats.is_ready = true;
  stats.num_waiting = 4;
  engine_->SetStats(stats);
  ScriptText("ok");
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions", kChat).status, 429);
  stats.num_waiting = 3;
  engine_->SetStats(stats);
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions", kChat).status, 200);
}

TEST_F(LifecycleTest, Row26PartialSubmitAbortsTheRest) {
  std::atomic<int> count{0};
  engine_->SetScript([&](const EngineRequest&) {
    FakeScript s;
    s.tokens.assign(100, 5);
    s.delay = milliseconds(10);
    if (count.fetch_add(1) == 2) s.submit_status = ResourceExhausted("full");
    return s;
  });
  ClientResponse r = PostJson(port_, "/v1/chat/completions",
                              R"({"messages":[{"role":"user","content":"hi"}],"n":4})");
  EXPECT_EQ(r.status, 429);
  EXPECT_TRUE(WaitAborts(2));
  EXPECT_TRUE(WaitNoJobs());
}

TEST_F(LifecycleTest, EngineErrorMidStreamIsAnErrorEvent) {
  const std::vector<int32_t> word = Encode(" word");
  engine_->SetScript([=](const EngineRequest&) {
    FakeScript s;
    s.tokens.assign(10, word[0]);
    s.error_after = 3;
    return s;
  });
  ClientResponse s = PostJson(port_, "/v1/chat/completions", kStreamChat);
  ASSERT_EQ(s.status, 200);
  const auto events = SseData(s.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json error = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(error["error"]["type"], "server_error");
  ClientResponse w = PostJson(port_, "/v1/chat/completions", kChat);
  EXPECT_EQ(w.status, 500);
  EXPECT_TRUE(Body(w)["error"].is_object());
  EXPECT_TRUE(WaitNoJobs());
}

// Row 31: readiness false at once, new requests 503, streams that finish in time finish,
// the rest end with an error event, and Drain returns.
TEST_F(LifecycleTest, Row31DrainFinishesThenAbortsStreams) {
  const std::vector<int32_t> word = Encode(" word");
  engine_->SetScript([=](const EngineRequest& r) {
    FakeScript s;
    const bool is_short = r.max_tokens == 5;
    s.tokens.assign(is_short ? 5 : 100000, word[0]);
    s.delay = milliseconds(is_short ? 40 : 5);
    return s;
  });
  const std::string short_stream =
      R"({"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5})";
  std::vector<std::unique_ptr<RawConnection>> long_streams, short_streams;
  for (int i = 0; i < 10; ++i) {
    long_streams.push_back(std::make_unique<RawConnection>(port_));
    long_streams.back()->Write(RawPost("/v1/chat/completions", kStreamChat));
    short_streams.push_back(std::make_unique<RawConnection>(port_));
    short_streams.back()->Write(RawPost("/v1/chat/completions", short_stream));
  }
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 20; }, milliseconds(3000)));
  std::thread drain([&] { server_->Drain(milliseconds(600)); });
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(500);
  while (!server_->is_draining() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 503);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  ClientResponse late = PostJson(port_, "/v1/chat/completions", kChat);
  EXPECT_EQ(late.status, 503);
  EXPECT_EQ(Body(late)["error"]["code"], "server_shutting_down");
  for (auto& c : short_streams) {
    const std::string body = c->ReadUntil("[DONE]", milliseconds(3000));
    EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos);
    EXPECT_EQ(body.find("server_shutting_down"), std::string::npos);
  }
  for (auto& c : long_streams) {
    const std::string body = c->ReadUntil("[DONE]", milliseconds(3000));
    EXPECT_NE(body.find("server_shutting_down"), std::string::npos);
    EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  }
  drain.join();
  EXPECT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 0; }, milliseconds(2000)));
  EXPECT_EQ(engine_->num_aborts(), 10);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 0);  // stopped
}

// A second SIGTERM (EndDrain) during a long drain: open streams get their final error event
// and [DONE] at once rather than being cut, whole responses a 503, and the server stops.
TEST_F(LifecycleTest, EndDrainGivesStreamsAFinalEvent) {
  ScriptSlow(100000, milliseconds(5));
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::make_unique<RawConnection>(port_));
    streams.back()->Write(RawPost("/v1/chat/completions", kStreamChat));
  }
  RawConnection whole(port_);
  whole.Write(RawPost("/v1/chat/completions", kChat));
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 5; }, milliseconds(3000)));
  const auto t0 = std::chrono::steady_clock::now();
  std::thread drain([&] { server_->Drain(milliseconds(60000)); });
  std::this_thread::sleep_for(milliseconds(100));
  server_->EndDrain();
  for (auto& c : streams) {
    const std::string body = c->ReadUntil("data: [DONE]", milliseconds(3000));
    EXPECT_NE(body.find("server_shutting_down"), std::string::npos);
    EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
    EXPECT_NE(body.find("0\r\n\r\n"), std::string::npos);  // the chunked body is complete
  }
  const std::string reply = whole.ReadUntil("}}", milliseconds(3000));
  EXPECT_EQ(reply.rfind("HTTP/1.1 503", 0), 0u) << reply;
  drain.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 0; }, milliseconds(2000)));
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 0);  // stopped
}

TEST_F(LifecycleTest, StopWithLiveRequestsAbortsThem) {
  ScriptSlow(100000, milliseconds(5));
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < 5; ++i) {
    streams.push_back(std::make_unique<RawConnection>(port_));
    streams.back()->Write(RawPost("/v1/chat/completions", kStreamChat));
  }
  ASSERT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 5; }, milliseconds(2000)));
  server_->Stop();
  EXPECT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 0; }, milliseconds(2000)));
  for (auto& c : streams) EXPECT_TRUE(c->WaitClosed(milliseconds(2000)));
}

TEST_F(LifecycleTest, RequestThenImmediateCloseStorm) {
  ScriptSlow(2000, milliseconds(5));
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<RawConnection>> conns;
    for (int i = 0; i < 64; ++i) {
      conns.push_back(std::make_unique<RawConnection>(port_));
      conns.back()->Write(RawPost("/v1/completions",
                                  R"({"prompt":"disconnect me","max_tokens":2000,"stream":true})"));
    }
    conns.clear();
  }
  EXPECT_TRUE(engine_->WaitFor([&] { return engine_->num_live() == 0; }, milliseconds(5000)));
  EXPECT_TRUE(WaitNoJobs());
  EXPECT_EQ(engine_->num_aborts(), engine_->num_submitted());
  ExpectAlive();
}

TEST_F(LifecycleTest, UnrequestedEngineAbortIsAnError) {
  const std::vector<int32_t> word = Encode(" word");
  engine_->SetScript([=](const EngineRequest&) {
    FakeScript s;
    s.tokens.assign(3, word[0]);
    s.end = FinishReason::kAbort;
    return s;
  });
  EXPECT_EQ(PostJson(port_, "/v1/chat/completions", kChat).status, 500);
  const auto events = SseData(PostJson(port_, "/v1/chat/completions", kStreamChat).body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_NE(events[events.size() - 2].find("\"error\""), std::string::npos);
}

TEST_F(LifecycleTest, DrainWithNothingInFlightIsQuick) {
  const auto t0 = std::chrono::steady_clock::now();
  server_->Drain(milliseconds(5000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1500));
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 0);
}

TEST_F(LifecycleTest, SecondServerOnTheSamePortFailsCleanly) {
  ServerConfig config = TestConfig();
  config.port = port_;
  Server other(config, *engine_, tok());
  const Status s = other.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  config.host = "not-an-address";
  Server bad(config, *engine_, tok());
  EXPECT_EQ(bad.Start().code(), StatusCode::kInvalidArgument);
  ExpectAlive();
}

TEST_F(LifecycleTest, ManyConcurrentStreams) {
  const std::vector<int32_t> tokens = Encode(" 多 streams 🙂 at once");
  engine_->SetScript([=](const EngineRequest&) {
    FakeScript s;
    s.tokens = tokens;
    s.delay = milliseconds(20);
    return s;
  });
  constexpr int kStreams = 1000;
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<RawConnection>(port_));
    ASSERT_TRUE(streams.back()->Write(RawPost("/v1/chat/completions", kStreamChat)));
  }
  int completed = 0;
  for (auto& c : streams) {
    const std::string body = c->ReadUntil("[DONE]", milliseconds(20000));
    completed += body.find("data: [DONE]") != std::string::npos;
  }
  EXPECT_EQ(completed, kStreams);
  EXPECT_TRUE(WaitNoJobs());
}

}  // namespace
}  // namespace peregrine::server::testing
