// The server's own cost per request with an engine that answers at once: parse, render,
// tokenize, submit, detokenize, format, HTTP. Prints percentiles; asserts nothing timed.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "server_fixture.h"

namespace peregrine::server::testing {
namespace {

struct Percentiles {
  double p50_us = 0;
  double p99_us = 0;
};

template <typename F>
Percentiles Measure(int warmup, int iterations, F request) {
  for (int i = 0; i < warmup; ++i) request();
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    request();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

TEST_F(ServerTest, OverheadPerRequest) {
  const std::string answer = "The capital of France is Paris.";
  ScriptText(answer);
  HttpClient client(port_);
  const std::string chat =
      R"({"model":"deepseek-v4-test","messages":[{"role":"system","content":"You are helpful."},)"
      R"({"role":"user","content":"What is the capital of France?"}],"max_tokens":64})";
  const std::string stream = chat.substr(0, chat.size() - 1) + R"(,"stream":true})";
  const std::string completion = R"({"prompt":"The capital of France is","max_tokens":64})";
  const ClientResponse check = client.Send("POST", "/v1/chat/completions", chat);
  ASSERT_EQ(check.status, 200);
  ASSERT_EQ(Body(check)["choices"][0]["message"]["content"], answer);

  const auto health = Measure(200, 2000, [&] { client.Send("GET", "/health"); });
  const auto whole = Measure(200, 2000, [&] { client.Send("POST", "/v1/chat/completions", chat); });
  const auto streamed = Measure(200, 2000, [&] { client.Send("POST", "/v1/chat/completions", stream); });
  const auto text = Measure(200, 2000, [&] { client.Send("POST", "/v1/completions", completion); });
  const size_t tokens = Encode(answer).size() + 1;
  std::printf("[overhead] keep-alive, 1 client, instant fake engine, %zu output tokens\n", tokens);
  std::printf("[overhead] GET /health              p50 %7.1f us  p99 %7.1f us\n", health.p50_us, health.p99_us);
  std::printf("[overhead] chat, whole              p50 %7.1f us  p99 %7.1f us\n", whole.p50_us, whole.p99_us);
  std::printf("[overhead] chat, streamed           p50 %7.1f us  p99 %7.1f us\n", streamed.p50_us, streamed.p99_us);
  std::printf("[overhead] completions, whole       p50 %7.1f us  p99 %7.1f us\n", text.p50_us, text.p99_us);
}

}  // namespace
}  // namespace peregrine::server::testing
