// FakeEngine: a scriptable EngineClient for the server tests. For each submitted request a
// script says which tokens to emit, how fast, and how it ends (or that Submit fails). Events
// come from one emitter thread, like the real engine's step loop. Requests with
// prompt_logprobs get FakePromptScores on their first event.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_client.h"

namespace peregrine::server::testing {

struct FakeScript {
  std::vector<int32_t> tokens;                 // emitted in order
  int tokens_per_event = 1;
  std::chrono::milliseconds first_delay{0};    // before the first event
  std::chrono::milliseconds delay{0};          // between events
  std::chrono::milliseconds queued{0};         // reported waiting before being scheduled
  FinishReason end = FinishReason::kLength;    // when the tokens run out
  std::optional<size_t> error_after;           // emit kError after this many tokens
  Status submit_status;                        // not ok: Submit fails with it
};

// The fake prompt scores: entry i (prompt token i + 1) has logprob -0.5 (i + 1), rank i + 1
// and `num_top` alternatives (token + k + 1) % vocab with logprob -0.1 - k.
std::vector<SampleResult> FakePromptScores(const std::vector<int32_t>& prompt, int num_top, int64_t vocab_size);

class FakeEngine final : public EngineClient {
 public:
  static constexpr int32_t kEos = 1;

  FakeEngine(int64_t vocab_size, int64_t max_context);
  ~FakeEngine() override;

  // The script for each request (default: "tokens" = {}, ending with kLength).
  void SetScript(std::function<FakeScript(const EngineRequest&)> script);
  void SetStats(EngineStats stats);

  Status Submit(EngineRequest request, EventSink sink) override;
  void Abort(const std::string& request_id) override;
  EngineStats Stats() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t max_context() const override { return max_context_; }
  std::vector<int32_t> eos_token_ids() const override { return {kEos}; }

  int num_submitted() const;
  int num_aborts() const;   // Abort calls for requests that were still live
  int num_live() const;
  std::vector<EngineRequest> submitted() const;
  // Polls until `done()` holds or the timeout passes (`done` may call the accessors).
  bool WaitFor(std::function<bool()> done, std::chrono::milliseconds timeout) const;

 private:
  struct Live {
    EngineRequest request;
    EventSink sink;
    FakeScript script;
    std::chrono::steady_clock::time_point arrival;
    size_t next = 0;
    bool is_aborted = false;
    bool has_scored = false;  // the prompt's scores went out
  };
  using Clock = std::chrono::steady_clock;
  using Due = std::pair<Clock::time_point, std::string>;

  void Loop();
  // Builds the next event of `live`; sets *finished when it is the last.
  EngineEvent NextEvent(Live& live, bool* finished);

  const int64_t vocab_size_;
  const int64_t max_context_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::function<FakeScript(const EngineRequest&)> script_;
  EngineStats stats_;
  std::map<std::string, Live> live_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  std::vector<EngineRequest> submitted_;
  int num_aborts_ = 0;
  bool is_stopping_ = false;
  std::thread thread_;
};

}  // namespace peregrine::server::testing
