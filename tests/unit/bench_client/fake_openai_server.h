// A scripted OpenAI-compatible streaming server on an ephemeral loopback port, for tests of the
// benchmark client. One thread per connection, blocking I/O: simple and good enough for a few
// hundred streams.
//
// Every POST streams max_tokens output chunks (one token each), then a usage chunk and [DONE].
// The request's "model" picks a behaviour:
//   "fail-500"     HTTP 500 with a JSON error body
//   "close-mid"    half of the chunks, then the connection closes without the chunked terminator
//   "error-chunk"  one token, an {"error": ...} chunk, [DONE]
//   "no-usage"     no usage chunk
//   "two-per-chunk" each chunk carries two tokens (usage counts tokens, not chunks)
//   "bad-json"     one token, then a chunk that is not JSON
// Chat requests (/v1/chat/completions) get a role-only first delta and then content deltas.
// GET /v1/models lists "fake-model".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace peregrine::bench_client::testing {

struct FakeServerScript {
  std::chrono::milliseconds first_token_delay{0};  // after the request, before the first token
  std::chrono::milliseconds token_delay{0};        // between token chunks
  std::string required_api_key;                    // "" accepts any; otherwise 401 on mismatch
  // > 0: close every connection this long after a response ends, as a server dropping idle
  // kept-alive connections does.
  std::chrono::milliseconds close_idle_after{0};
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerScript script);
  ~FakeOpenAiServer();  // closes every connection and joins every thread
  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  std::string base_url() const;  // "http://127.0.0.1:<port>"
  std::vector<std::string> bodies() const;  // request bodies received, in arrival order
  int64_t num_connections() const { return num_connections_.load(); }

 private:
  struct Impl;
  void AcceptLoop();
  void Serve(int connection_index);

  std::unique_ptr<Impl> impl_;
  FakeServerScript script_;
  std::atomic<bool> is_stopping_{false};
  std::atomic<int64_t> num_connections_{0};
  mutable std::mutex mu_;
  std::vector<std::string> bodies_;   // guarded by mu_
  std::vector<std::thread> threads_;  // connection threads; guarded by mu_
  std::thread accept_thread_;
};

}  // namespace peregrine::bench_client::testing
