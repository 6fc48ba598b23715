// The /metrics exposition: vLLM's series and meanings (finish reasons on every path, queue
// time as waiting before the first scheduling, the per-request histograms), vLLM naming.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "exposition_parser.h"
#include "server/exposition.h"
#include "server/histogram.h"
#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

using std::chrono::milliseconds;
using Samples = std::map<std::string, double>;

// `{model_name="...",<extra>}`
std::string L(const std::string& extra = {}) {
  std::string s = std::string("{model_name=\"") + kModel + "\"";
  if (!extra.empty()) s += "," + extra;
  return s + "}";
}

class MetricsTest : public ServerTest {
 protected:
  Samples Scrape(uint16_t port = 0) {
    ClientResponse r = Fetch(port == 0 ? port_ : port, "GET", "/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.Header("content-type").find("text/plain"), std::string::npos);
    std::string error;
    Samples samples = ParseExposition(r.body, &error);
    EXPECT_TRUE(error.empty()) << "bad line: " << error;
    return samples;
  }
  static double Value(const Samples& samples, const std::string& series) {
    auto it = samples.find(series);
    EXPECT_NE(it, samples.end()) << series;
    return it == samples.end() ? -1.0 : it->second;
  }
  static double Success(const Samples& s, const char* reason) {
    return Value(s, std::string("peregrine:request_success_total") + L(std::string("finished_reason=\"") + reason + "\""));
  }
  // request_success_total over every reason reaches `n` (an engine finish may come late).
  Samples WaitFinished(int n) {
    Samples s;
    for (int i = 0; i < 200; ++i) {
      s = Scrape();
      double total = 0;
      for (const char* r : {"stop", "length", "abort", "error"}) total += Success(s, r);
      if (total >= n) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return s;
  }
  static std::string RawRequest(const std::string& body) {
    std::string r = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: ";
    r.append(std::to_string(body.size())).append("\r\n\r\n").append(body);
    return r;
  }
  Json UserChat(Json extra = Json::object()) {
    Json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
    return body;
  }
};

// Every way a request ends lands in its own finished_reason; a stop string is a stop even
// though the engine request it ends is aborted afterwards.
TEST_F(MetricsTest, FinishedReasonOnEveryPath) {
  const std::vector<int32_t> words = Encode(" one two three four five six seven eight");
  // EOS (engine kStop).
  ScriptText("fine");
  ASSERT_EQ(Chat(UserChat()).status, 200);
  // A stop token id: the engine's kStop without EOS.
  engine_->SetScript([&](const EngineRequest&) {
    FakeScript s;
    s.tokens = words;
    s.end = FinishReason::kStop;
    return s;
  });
  ASSERT_EQ(Chat(UserChat()).status, 200);
  // Stop strings, whole and streamed: the engine keeps going until the abort reaches it.
  engine_->SetScript([&](const EngineRequest&) {
    FakeScript s;
    for (int i = 0; i < 50; ++i) s.tokens.insert(s.tokens.end(), words.begin(), words.end());
    s.delay = milliseconds(2);
    return s;
  });
  ClientResponse whole = Chat(UserChat({{"stop", "three"}}));
  ASSERT_EQ(whole.status, 200);
  EXPECT_EQ(Body(whole)["choices"][0]["finish_reason"], "stop");
  ASSERT_EQ(Chat(UserChat({{"stop", Json::array({"five"})}, {"stream", true}})).status, 200);
  // Length.
  ASSERT_EQ(Chat(UserChat({{"max_tokens", 3}})).status, 200);
  // Error.
  engine_->SetScript([&](const EngineRequest&) {
    FakeScript s;
    s.tokens = words;
    s.error_after = 2;
    return s;
  });
  EXPECT_EQ(Chat(UserChat()).status, 500);
  // Abort: the client goes away mid-stream.
  engine_->SetScript([&](const EngineRequest&) {
    FakeScript s;
    for (int i = 0; i < 100; ++i) s.tokens.insert(s.tokens.end(), words.begin(), words.end());
    s.delay = milliseconds(5);
    return s;
  });
  {
    RawConnection c(port_);
    c.Write(RawRequest(UserChat({{"stream", true}}).dump()));
    ASSERT_NE(c.ReadUntil("one", milliseconds(2000)).find("200 OK"), std::string::npos);
    c.Close();
  }
  const Samples s = WaitFinished(7);
  EXPECT_EQ(Success(s, "stop"), 4);
  EXPECT_EQ(Success(s, "length"), 1);
  EXPECT_EQ(Success(s, "error"), 1);
  EXPECT_EQ(Success(s, "abort"), 1);
  EXPECT_EQ(Value(s, std::string("peregrine:e2e_request_latency_seconds_count") + L()), 7);
}

// Queue time is queued -> first scheduled (what the engine reports), not time to first
// output: a request scheduled at once but 600 ms in prefill waited ~0.
TEST_F(MetricsTest, QueueTimeEndsWhenTheRequestIsFirstScheduled) {
  const std::vector<int32_t> tokens = Encode(" one two");
  for (int queued_ms : {0, 400}) {
    engine_->SetScript([&](const EngineRequest&) {
      FakeScript s;
      s.tokens = tokens;
      s.tokens.push_back(FakeEngine::kEos);
      s.queued = milliseconds(queued_ms);
      s.first_delay = milliseconds(600);
      return s;
    });
    ASSERT_EQ(Chat(UserChat()).status, 200);
  }
  const Samples s = Scrape();
  const std::string q = "peregrine:request_queue_time_seconds_bucket";
  EXPECT_EQ(Value(s, q + L("le=\"0.3\"")), 1);  // the first waited 0 s
  EXPECT_EQ(Value(s, q + L("le=\"0.5\"")), 2);  // the second 0.4 s
  EXPECT_NEAR(Value(s, std::string("peregrine:request_queue_time_seconds_sum") + L()), 0.4, 0.05);
  // Prefill: scheduled -> first token, 0.6 s and 0.2 s.
  const std::string p = "peregrine:request_prefill_time_seconds_bucket";
  EXPECT_EQ(Value(s, p + L("le=\"0.3\"")), 1);
  EXPECT_EQ(Value(s, p + L("le=\"0.8\"")), 2);
  EXPECT_EQ(Value(s, std::string("peregrine:request_inference_time_seconds_count") + L()), 2);
  EXPECT_GE(Value(s, std::string("peregrine:time_to_first_token_seconds_sum") + L()), 1.2);
}

TEST_F(MetricsTest, EverySeriesWithVllmNames) {
  ScriptText("one two three");
  const int64_t num_tokens = static_cast<int64_t>(Encode("one two three").size()) + 1;  // and EOS
  // Two prompts x n=2, then one chat.
  ASSERT_EQ(Completion({{"prompt", Json::array({"a b", "c d e"})}, {"n", 2}, {"max_tokens", 50}}).status, 200);
  ASSERT_EQ(Chat(UserChat({{"max_tokens", 40}})).status, 200);
  EngineStats stats;
  stats.is_ready = true;
  stats.num_waiting = 7;
  stats.kv_usage = 0.25;
  stats.kv_capacity_tokens = 123456;
  stats.kv_num_blocks = 482;
  stats.kv_block_tokens = 256;
  stats.kv_num_snapshots = 9;
  stats.kv_pool_bytes = 987654321;
  stats.num_preemptions = 3;
  stats.prefix_cache_queries = 100;
  stats.prefix_cache_hits = 40;
  stats.device_busy_seconds = 12.5;
  stats.device_idle_seconds = 0.25;
  stats.device_draft_seconds = 0.125;
  stats.runner_launch_seconds = 1.5;
  stats.runner_collect_seconds = 0.75;
  stats.runner_draft_seconds = 0.5;
  stats.step_tokens.buckets[0] = 2;   // two steps of one token
  stats.step_tokens.buckets[3] = 1;   // one of 30 (<= 32)
  stats.step_tokens.buckets.back() = 1;  // one above 16384
  stats.step_tokens.sum = 2 + 30 + 20000;
  engine_->SetStats(stats);
  const Samples s = Scrape();
  auto v = [&](const std::string& name, const std::string& extra = {}) {
    return Value(s, "peregrine:" + name + L(extra));
  };
  EXPECT_EQ(v("num_requests_waiting"), 7);
  EXPECT_GE(v("num_requests_running"), 0);
  EXPECT_EQ(v("kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(v("gpu_cache_usage_perc"), 0.25);
  EXPECT_EQ(v("kv_cache_capacity_tokens"), 123456);
  EXPECT_EQ(v("kv_cache_pool_bytes"), 987654321);
  EXPECT_EQ(v("cache_config_info", "block_size=\"256\",cache_dtype=\"bfloat16\",enable_prefix_caching=\"True\","
                                   "num_gpu_blocks=\"482\",num_snapshots=\"9\""),
            1);
  EXPECT_EQ(v("num_preemptions_total"), 3);
  EXPECT_EQ(v("prefix_cache_queries_total"), 100);
  EXPECT_EQ(v("prefix_cache_hits_total"), 40);
  EXPECT_EQ(v("device_busy_seconds_total"), 12.5);
  EXPECT_EQ(v("device_idle_seconds_total"), 0.25);
  EXPECT_EQ(v("device_draft_seconds_total"), 0.125);
  EXPECT_EQ(v("runner_host_seconds_total", "phase=\"launch\""), 1.5);
  EXPECT_EQ(v("runner_host_seconds_total", "phase=\"collect\""), 0.75);
  EXPECT_EQ(v("runner_host_seconds_total", "phase=\"draft\""), 0.5);
  EXPECT_EQ(v("generation_tokens_total"), 5.0 * static_cast<double>(num_tokens));
  EXPECT_GT(v("prompt_tokens_total"), 0);
  EXPECT_EQ(v("request_success_total", "finished_reason=\"stop\""), 5);

  EXPECT_EQ(v("iteration_tokens_total_bucket", "le=\"1\""), 2);
  EXPECT_EQ(v("iteration_tokens_total_bucket", "le=\"32\""), 3);
  EXPECT_EQ(v("iteration_tokens_total_bucket", "le=\"16384\""), 3);
  EXPECT_EQ(v("iteration_tokens_total_bucket", "le=\"+Inf\""), 4);
  EXPECT_EQ(v("iteration_tokens_total_sum"), 20032);

  // Per engine request (5 choices).
  EXPECT_EQ(v("request_prompt_tokens_count"), 5);
  EXPECT_GT(v("request_prompt_tokens_sum"), 0);
  EXPECT_EQ(v("request_generation_tokens_count"), 5);
  EXPECT_EQ(v("request_generation_tokens_sum"), 5.0 * static_cast<double>(num_tokens));
  EXPECT_EQ(v("request_params_max_tokens_count"), 5);
  EXPECT_EQ(v("request_params_max_tokens_sum"), 4 * 50 + 40);
  EXPECT_EQ(v("request_params_max_tokens_bucket", "le=\"50\""), 5);
  EXPECT_EQ(v("request_params_max_tokens_bucket", "le=\"20\""), 0);
  // Token-count buckets go 1, 2, 5, ... up to the context length (4096).
  EXPECT_EQ(v("request_prompt_tokens_bucket", "le=\"2000\""), 5);
  EXPECT_EQ(s.count(std::string("peregrine:request_prompt_tokens_bucket") + L("le=\"5000\"")), 0u);
  // Per prompt (3 of them): n and the longest choice.
  EXPECT_EQ(v("request_params_n_count"), 3);
  EXPECT_EQ(v("request_params_n_bucket", "le=\"1\""), 1);
  EXPECT_EQ(v("request_params_n_bucket", "le=\"2\""), 3);
  EXPECT_EQ(v("request_max_num_generation_tokens_count"), 3);
  EXPECT_EQ(v("request_max_num_generation_tokens_sum"), 3.0 * static_cast<double>(num_tokens));
  for (const char* h : {"time_to_first_token_seconds", "inter_token_latency_seconds", "time_per_output_token_seconds",
                        "request_time_per_output_token_seconds", "e2e_request_latency_seconds",
                        "request_queue_time_seconds", "request_inference_time_seconds",
                        "request_prefill_time_seconds", "request_decode_time_seconds"}) {
    const std::string name = h;
    EXPECT_EQ(v(name + "_bucket", "le=\"+Inf\""), v(name + "_count")) << h;
    EXPECT_TRUE(s.count("peregrine:" + name + std::string("_sum") + L())) << h;
    if (name.find("token_latency") == std::string::npos && name != "time_per_output_token_seconds") {
      EXPECT_EQ(v(name + "_count"), 5) << h;
    }
  }
  EXPECT_EQ(v("inter_token_latency_seconds_count"), 5.0 * static_cast<double>(num_tokens - 1));
  // vLLM's first TTFT bucket.
  EXPECT_TRUE(s.count(std::string("peregrine:time_to_first_token_seconds_bucket") + L("le=\"0.001\"")));
}

// vLLM's spec_decode counters appear while the engine speculates, with every draft
// position, and not at all when it does not.
TEST_F(MetricsTest, SpeculativeDecodingCounters) {
  EngineStats stats;
  engine_->SetStats(stats);
  Samples s = Scrape();
  for (const auto& [series, value] : s) EXPECT_EQ(series.find("spec_decode"), std::string::npos) << series;
  stats.spec_lookahead = 3;
  stats.spec_num_drafts = 10;
  stats.spec_num_draft_tokens = 30;
  stats.spec_num_accepted_tokens = 17;
  stats.spec_accepted_per_position = {9, 6, 2};
  engine_->SetStats(stats);
  s = Scrape();
  auto v = [&](const std::string& name, const std::string& extra = {}) {
    return Value(s, "peregrine:" + name + L(extra));
  };
  EXPECT_EQ(v("spec_decode_num_drafts_total"), 10);
  EXPECT_EQ(v("spec_decode_num_draft_tokens_total"), 30);
  EXPECT_EQ(v("spec_decode_num_accepted_tokens_total"), 17);
  EXPECT_EQ(v("spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\""), 9);
  EXPECT_EQ(v("spec_decode_num_accepted_tokens_per_pos_total", "position=\"2\""), 2);
}

// The KV-transfer series of disaggregated serving: present (and set) only in a mode.
TEST_F(MetricsTest, KvTransferSeriesOnlyWithDisaggregation) {
  std::string error;
  const auto plain = ParseExposition(ServerMetrics(MetricsOptions{MetricsNaming::kPeregrine, kModel, 64}).Render({}),
                                     &error);
  ASSERT_TRUE(error.empty()) << error;
  for (const auto& [series, value] : plain) EXPECT_EQ(series.find("kv_transfer"), std::string::npos) << series;
  ServerMetrics m(MetricsOptions{MetricsNaming::kPeregrine, kModel, 64, true});
  m.AddKvPublished();
  m.ObserveKvTransfer(true, 4096, 0.02);
  m.ObserveKvTransfer(true, 1024, 0.5);
  m.ObserveKvTransfer(false, 0, 3.0);
  m.AddKvRecompute();
  const auto s = ParseExposition(m.Render({}), &error);
  ASSERT_TRUE(error.empty()) << error;
  auto v = [&](const std::string& name, const std::string& extra = {}) { return Value(s, "peregrine:" + name + L(extra)); };
  EXPECT_EQ(v("kv_transfer_rooms_published_total"), 1);
  EXPECT_EQ(v("kv_transfer_pulls_total", "outcome=\"ok\""), 2);
  EXPECT_EQ(v("kv_transfer_pulls_total", "outcome=\"failed\""), 1);
  EXPECT_EQ(v("kv_transfer_bytes_total"), 5120);
  EXPECT_EQ(v("kv_transfer_recomputed_total"), 1);
  EXPECT_EQ(v("kv_transfer_seconds_count"), 2);  // successful pulls only
  EXPECT_DOUBLE_EQ(v("kv_transfer_seconds_sum"), 0.52);
}

// --metrics-prefix vllm: every series is `vllm:` with vLLM's labels (model_name, engine), and
// every series vLLM's own Grafana dashboard queries is there.
TEST_F(MetricsTest, VllmNamingForVllmDashboards) {
  ServerConfig config = TestConfig();
  config.metrics_naming = MetricsNaming::kVllm;
  Restart(config);
  ScriptText("one two");
  ASSERT_EQ(Chat(UserChat()).status, 200);
  const Samples s = Scrape();
  std::map<std::string, int> names;
  for (const auto& [series, value] : s) {
    EXPECT_EQ(series.rfind("vllm:", 0), 0u) << series;
    EXPECT_NE(series.find(std::string("{model_name=\"") + kModel + "\",engine=\"0\""), std::string::npos) << series;
    ++names[series.substr(0, series.find('{'))];
  }
  for (const char* name :
       {"vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
        "vllm:e2e_request_latency_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:time_per_output_token_seconds_bucket", "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_bucket", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
        "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
        "vllm:request_success_total", "vllm:request_queue_time_seconds_sum",
        "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
        "vllm:request_max_num_generation_tokens_sum", "vllm:inter_token_latency_seconds_bucket",
        "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:iteration_tokens_total_bucket", "vllm:cache_config_info"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  EXPECT_EQ(Value(s, std::string("vllm:request_success_total{model_name=\"") + kModel +
                         "\",engine=\"0\",finished_reason=\"stop\"}"),
            1);
}

// --metrics-port: /metrics (and /health) on a listener of its own, public; the API port then
// has no /metrics (an unknown path: 401 without the key, 404 with it) and the metrics port
// nothing else.
TEST_F(MetricsTest, MetricsPortServesOnlyMetrics) {
  ServerConfig config = TestConfig();
  config.api_key = "sk-test-key";
  config.metrics_port = 0;
  Restart(config);
  const uint16_t metrics = server_->metrics_port();
  ASSERT_NE(metrics, 0);
  ASSERT_NE(metrics, port_);
  ScriptText("fine");
  const Headers key = {{"authorization", "Bearer sk-test-key"}};
  ASSERT_EQ(Chat(UserChat(), key).status, 200);
  const Samples s = Scrape(metrics);
  EXPECT_EQ(Success(s, "stop"), 1);
  EXPECT_EQ(Fetch(metrics, "GET", "/health").status, 200);
  EXPECT_EQ(Fetch(metrics, "POST", "/metrics", "{}").status, 405);
  EXPECT_EQ(Fetch(metrics, "GET", "/v1/models", {}, key).status, 404);
  EXPECT_EQ(PostJson(metrics, "/v1/chat/completions", UserChat().dump(), key).status, 404);
  EXPECT_EQ(Fetch(port_, "GET", "/metrics").status, 401);
  EXPECT_EQ(Fetch(port_, "GET", "/metrics", {}, key).status, 404);
  // A metrics port equal to the API port is a configuration error.
  config.port = metrics;
  config.metrics_port = metrics;
  EXPECT_FALSE(ValidateServerConfig(config).ok());
}

TEST(ExpositionTest, OneTwoFiveBoundsStopAtTheMaximum) {
  EXPECT_EQ(OneTwoFiveBounds(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(OneTwoFiveBounds(4096).back(), 2000);
  EXPECT_EQ(OneTwoFiveBounds(1), (std::vector<double>{1}));
}

TEST(ExpositionTest, HistogramIsCumulativeWithInfAndEscapedLabels) {
  Histogram h({1.0, 2.5});
  for (double x : {0.5, 1.0, 2.0, 3.0, 100.0}) h.Observe(x);
  h.Observe(std::nan(""));
  ExpositionWriter w("p", Label("model_name", "a\"b\\c\nd"));
  const std::vector<uint64_t> counts = h.counts();
  w.HistogramSeries("h_seconds", "Help.", h.upper_bounds(), counts, h.sum());
  const std::string text = w.Take();
  const std::string l = "model_name=\"a\\\"b\\\\c\\nd\"";
  EXPECT_NE(text.find("# TYPE p:h_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("p:h_seconds_bucket{" + l + ",le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("p:h_seconds_bucket{" + l + ",le=\"2.5\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("p:h_seconds_bucket{" + l + ",le=\"+Inf\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("p:h_seconds_sum{" + l + "} 106.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("p:h_seconds_count{" + l + "} 5\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace peregrine::server::testing
