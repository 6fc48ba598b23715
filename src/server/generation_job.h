// GenerationJob: one chat or completions request in flight. It submits one engine request per
// choice, receives their events on the connection thread, runs each choice's ChoiceDecoder,
// and writes the response (SSE chunks or one body) through a ResponseFormatter.
//
// Threads: created and used on the request's connection thread (channel->home()); engine
// sinks post every event there. Lifetime: shared by the engine sinks and the tasks they post;
// it unregisters itself when every engine request it submitted has finished.
//
// Invariants: every submitted engine request is aborted when its output is no longer wanted
// (stop string, client gone, error, shutdown); a response is written at most once; after the
// response ends nothing more is written.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_parser.h"
#include "server/api_error.h"
#include "server/choice_decoder.h"
#include "server/openai_request.h"
#include "server/response_channel.h"
#include "server/serving_context.h"

namespace peregrine::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served
};

// The OpenAI usage object (with prompt_tokens_details.cached_tokens).
Json UsageJson(const Usage& usage);

// A choice's whole output, for non-streamed responses.
struct ChoiceResult {
  std::string text;
  chat::ParsedOutput message;
  std::vector<SampleResult> samples;
  std::vector<SampleResult> prompt_logprobs;  // entry i scores prompt token i + 1
  std::string finish_reason;
  size_t prompt_index = 0;
};

// The API-specific half: response JSON for chat or completions.
class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  // Streaming: SSE events before any output (the chat role chunks, completions echo).
  virtual void StreamStart(std::string* out) = 0;
  // Streaming: SSE events for one update of choice `index` (nothing for an empty update).
  virtual void StreamUpdate(size_t index, const ChoiceUpdate& update, std::string* out) = 0;
  // Streaming: the final usage chunk (stream_options.include_usage).
  virtual Json UsageChunk(const Usage& usage) = 0;
  // The whole response body.
  virtual Json Whole(const std::vector<ChoiceResult>& choices, const Usage& usage) = 0;
};

struct JobChoice {
  EngineRequest request;
  ChoiceDecoderOptions decoder;
  size_t prompt_index = 0;
};

struct JobSpec {
  std::vector<JobChoice> choices;
  std::vector<int64_t> prompt_lengths;  // one per prompt
  bool stream = false;
  bool include_usage = false;
  std::string request_id;               // x-request-id of the HTTP exchange
  std::optional<Bootstrap> bootstrap;   // decode side of disaggregation: the KV to pull first
  std::chrono::steady_clock::time_point arrival;
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // `context` is shared so a job that outlives the server (its engine sink still held by an
  // engine after Stop) can still release its admission ticket and registry entry.
  GenerationJob(std::shared_ptr<ServingContext> context, std::shared_ptr<ResponseChannel> channel,
                std::unique_ptr<ResponseFormatter> formatter, JobSpec spec,
                std::shared_ptr<void> admission);
  ~GenerationJob();

  // Submits every choice. On a refused submission the others are aborted and the error is
  // the response (429 on a full queue). Call once, on the connection thread.
  void Start();

 private:
  enum class State { kRunning, kDone, kFailed };
  struct Slot;

  void OnEvent(size_t index, const EngineEvent& event);
  // Token counts, TTFT and token gaps of every event; the per-request histograms at its finish.
  void RecordMetrics(Slot& slot, const EngineEvent& event);
  void RecordFinish(const Slot& slot, const EngineEvent& event);
  // Per prompt, once every engine request ended: n and the longest choice.
  void RecordPromptGroups() const;
  void OnClientGone();
  void AbortForShutdown();
  // Aborts every engine request that has not finished.
  void AbortAll();
  void Fail(const ApiError& error);
  void CompleteIfDone();
  void MaybeUnregister();
  Usage CurrentUsage() const;
  // The per-request log line (ServerConfig::log_requests): id, HTTP status, outcome, tokens.
  void LogRequest(int status, std::string_view outcome, const Usage& usage) const;

  std::shared_ptr<ServingContext> context_;
  std::shared_ptr<ResponseChannel> channel_;
  std::unique_ptr<ResponseFormatter> formatter_;
  JobSpec spec_;
  std::shared_ptr<void> admission_;
  std::vector<Slot> slots_;
  State state_ = State::kRunning;
  std::optional<uint64_t> registry_key_;
  size_t num_engine_live_ = 0;
};

}  // namespace peregrine::server
