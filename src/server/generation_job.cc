#include "server/generation_job.h"

#include <algorithm>
#include <utility>

#include "base/log.h"
#include "server/sse.h"

namespace peregrine::server {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::time_point EventTime(const EngineEvent& event) {
  return event.time == Clock::time_point{} ? Clock::now() : event.time;
}

RequestOutcome OutcomeOf(std::string_view reason) {
  if (reason == "stop" || reason == "tool_calls") return RequestOutcome::kStop;
  if (reason == "length") return RequestOutcome::kLength;
  if (reason == "abort") return RequestOutcome::kAbort;
  return RequestOutcome::kError;
}

RequestOutcome OutcomeOf(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return RequestOutcome::kStop;
    case FinishReason::kLength:
      return RequestOutcome::kLength;
    case FinishReason::kAbort:
      return RequestOutcome::kAbort;
    case FinishReason::kError:
      return RequestOutcome::kError;
  }
  return RequestOutcome::kError;
}

}  // namespace

struct GenerationJob::Slot {
  Slot(const tokenizer::Tokenizer& tokenizer, ChoiceDecoderOptions options)
      : decoder(tokenizer, std::move(options)) {}

  std::string engine_id;
  size_t prompt_index = 0;
  ChoiceDecoder decoder;
  ChoiceResult result;
  bool is_submitted = false;
  bool is_engine_done = true;  // until submitted
  bool has_first_token = false;
  bool has_counted_prompt = false;
  int64_t cached_tokens = 0;
  int64_t max_tokens = 0;
  int64_t num_engine_tokens = 0;          // what the engine generated, stop-string overrun included
  std::optional<RequestOutcome> outcome;  // set when the decoder finished the choice
  Clock::time_point first_token_time;
  Clock::time_point last_token_time;      // the newest token the client could still see
  Clock::time_point finish_time;          // when the decoder finished the choice
};

GenerationJob::GenerationJob(std::shared_ptr<ServingContext> context,
                             std::shared_ptr<ResponseChannel> channel,
                             std::unique_ptr<ResponseFormatter> formatter, JobSpec spec,
                             std::shared_ptr<void> admission)
    : context_(std::move(context)),
      channel_(std::move(channel)),
      formatter_(std::move(formatter)),
      spec_(std::move(spec)),
      admission_(std::move(admission)) {}

GenerationJob::~GenerationJob() {
  if (registry_key_) context_->registry.Remove(*registry_key_);
}

void GenerationJob::Start() {
  if (channel_->is_client_gone()) return;
  slots_.reserve(spec_.choices.size());
  JobRegistry::Entry entry;
  for (JobChoice& choice : spec_.choices) {
    Slot& slot = slots_.emplace_back(context_->tokenizer, std::move(choice.decoder));
    slot.engine_id = choice.request.id;
    slot.max_tokens = choice.request.max_tokens;
    slot.result.prompt_index = choice.prompt_index;
    slot.prompt_index = choice.prompt_index;
    entry.engine_ids.push_back(slot.engine_id);
  }
  const std::weak_ptr<GenerationJob> weak = weak_from_this();
  const std::shared_ptr<TaskQueue> home = channel_->home();
  entry.abort_for_shutdown = [weak, home] {
    home->Post([weak] {
      if (auto job = weak.lock()) job->AbortForShutdown();
    });
  };
  registry_key_ = context_->registry.Add(std::move(entry));
  channel_->SetCancelHandler([weak] {
    if (auto job = weak.lock()) job->OnClientGone();
  });

  const std::shared_ptr<GenerationJob> self = shared_from_this();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    EventSink sink = [self, home, i](const EngineEvent& event) {
      home->Post([self, i, event] { self->OnEvent(i, event); });
    };
    Status status = context_->engine.Submit(std::move(spec_.choices[i].request), std::move(sink));
    if (!status.ok()) {
      Fail(FromStatus(status, context_->config.retry_after_seconds));
      MaybeUnregister();
      return;
    }
    slot.is_submitted = true;
    slot.is_engine_done = false;
    ++num_engine_live_;
  }
  spec_.choices.clear();
  if (spec_.stream && state_ == State::kRunning) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers = {{"cache-control", "no-cache"}, {"x-accel-buffering", "no"}};
    channel_->BeginStream(std::move(head));
    std::string out;
    formatter_->StreamStart(&out);
    channel_->Write(out);
  }
}

void GenerationJob::OnEvent(size_t index, const EngineEvent& event) {
  Slot& slot = slots_[index];
  if (slot.is_engine_done) return;
  slot.cached_tokens = std::max(slot.cached_tokens, event.num_cached_prompt_tokens);
  RecordMetrics(slot, event);
  if (event.finish) {
    slot.is_engine_done = true;
    --num_engine_live_;
  }
  if (state_ == State::kRunning && !slot.decoder.is_finished()) {
    ChoiceUpdate update = slot.decoder.OnEvent(event);
    if (update.finish_reason) {
      // Decided here: a stop string ends the choice before the engine request, whose own
      // finish (the abort below) comes later and must not count as one.
      slot.outcome = OutcomeOf(*update.finish_reason);
      slot.finish_time = EventTime(event);
    }
    if (slot.decoder.is_stopped_by_string() && !event.finish) {
      context_->engine.Abort(slot.engine_id);
    }
    if (update.finish_reason == "error") {
      ApiError error = InternalError("The engine failed to generate a response.");
      Fail(error);
    } else if (update.finish_reason == "abort") {
      Fail(InternalError("The engine aborted the request."));
    } else {
      if (spec_.stream) {
        std::string out;
        formatter_->StreamUpdate(index, update, &out);
        channel_->Write(out);
      } else {
        ChoiceResult& r = slot.result;
        r.text += update.text;
        chat::AppendOutputDelta(update.delta, &r.message);
        for (SampleResult& s : update.samples) r.samples.push_back(std::move(s));
        if (!update.prompt_logprobs.empty()) r.prompt_logprobs = std::move(update.prompt_logprobs);
      }
      if (update.finish_reason) slot.result.finish_reason = *update.finish_reason;
      CompleteIfDone();
    }
  }
  if (event.finish) RecordFinish(slot, event);
  MaybeUnregister();
}

void GenerationJob::RecordMetrics(Slot& slot, const EngineEvent& event) {
  ServerMetrics& m = context_->metrics;
  const Clock::time_point now = EventTime(event);
  if (!slot.has_counted_prompt && event.num_prompt_tokens > 0) {
    m.AddPromptTokens(event.num_prompt_tokens);
    slot.has_counted_prompt = true;
  }
  if (event.token_ids.empty()) return;
  const auto num = static_cast<int64_t>(event.token_ids.size());
  m.AddGenerationTokens(num);
  slot.num_engine_tokens += num;
  // Tokens after a stop string (the engine had not seen the abort yet) reach no client.
  if (slot.decoder.is_finished()) return;
  if (!slot.has_first_token) {
    slot.has_first_token = true;
    slot.first_token_time = now;
    m.ObserveFirstToken(Seconds(now - spec_.arrival));
  } else {
    m.ObserveTokenGap(Seconds(now - slot.last_token_time));
  }
  slot.last_token_time = now;
}

void GenerationJob::RecordFinish(const Slot& slot, const EngineEvent& event) {
  FinishedRequest f;
  f.outcome = slot.outcome.value_or(OutcomeOf(*event.finish));
  f.num_prompt_tokens = event.num_prompt_tokens;
  f.num_generation_tokens = slot.num_engine_tokens;
  f.max_tokens = slot.max_tokens;
  const Clock::time_point end = slot.outcome ? slot.finish_time : EventTime(event);
  f.e2e_s = Seconds(end - spec_.arrival);
  const Clock::time_point scheduled = event.scheduled_time;
  if (scheduled != Clock::time_point{}) {
    f.queue_s = Seconds(scheduled - event.arrival_time);
    if (slot.has_first_token) {
      f.prefill_s = Seconds(slot.first_token_time - scheduled);
      f.decode_s = Seconds(slot.last_token_time - slot.first_token_time);
      f.inference_s = Seconds(slot.last_token_time - scheduled);
    }
  }
  context_->metrics.ObserveFinished(f);
}

void GenerationJob::OnClientGone() {
  if (state_ != State::kRunning) return;
  state_ = State::kFailed;
  AbortAll();
  if (context_->config.log_requests) LogRequest(499, "client_gone", CurrentUsage());
}

void GenerationJob::AbortForShutdown() {
  Fail(Draining(context_->config.retry_after_seconds));
}

void GenerationJob::AbortAll() {
  for (Slot& slot : slots_) {
    if (slot.is_submitted && !slot.is_engine_done) context_->engine.Abort(slot.engine_id);
  }
}

void GenerationJob::Fail(const ApiError& error) {
  if (state_ != State::kRunning) return;
  state_ = State::kFailed;
  AbortAll();
  if (context_->config.log_requests) LogRequest(error.status, error.code.empty() ? error.type : error.code, CurrentUsage());
  if (channel_->is_started()) {
    std::string out;
    AppendSseEvent(ErrorEnvelope(error), &out);
    AppendSseDone(&out);
    channel_->Write(out);
    channel_->End();
  } else {
    channel_->Respond(ErrorResponse(error));
  }
}

void GenerationJob::CompleteIfDone() {
  if (state_ != State::kRunning) return;
  for (const Slot& slot : slots_) {
    if (!slot.decoder.is_finished()) return;
  }
  state_ = State::kDone;
  const Usage usage = CurrentUsage();
  if (context_->config.log_requests) {
    std::string reasons;
    for (const Slot& slot : slots_) {
      if (!reasons.empty()) reasons += ',';
      reasons += slot.result.finish_reason;
    }
    LogRequest(200, reasons, usage);
  }
  if (spec_.stream) {
    std::string out;
    if (spec_.include_usage) AppendSseEvent(formatter_->UsageChunk(usage), &out);
    AppendSseDone(&out);
    channel_->Write(out);
    channel_->End();
    return;
  }
  std::vector<ChoiceResult> results;
  results.reserve(slots_.size());
  for (Slot& slot : slots_) results.push_back(std::move(slot.result));
  HttpResponse response;
  response.body = DumpJson(formatter_->Whole(results, usage));
  channel_->Respond(std::move(response));
}

Usage GenerationJob::CurrentUsage() const {
  Usage usage;
  for (int64_t n : spec_.prompt_lengths) usage.prompt_tokens += n;
  for (const Slot& slot : slots_) usage.completion_tokens += slot.decoder.num_tokens();
  // Per prompt, what its best-served choice found in the prefix cache.
  std::vector<int64_t> cached(spec_.prompt_lengths.size(), 0);
  for (const Slot& slot : slots_) {
    const size_t p = slot.result.prompt_index;
    if (p < cached.size()) cached[p] = std::max(cached[p], slot.cached_tokens);
  }
  for (int64_t c : cached) usage.cached_tokens += c;
  return usage;
}

void GenerationJob::LogRequest(int status, std::string_view outcome, const Usage& usage) const {
  LogInfo("request {}: status {} ({}), {} choice(s), prompt {} tokens ({} cached), completion {} tokens, {:.3f} s",
          spec_.request_id, status, outcome, slots_.size(), usage.prompt_tokens, usage.cached_tokens,
          usage.completion_tokens, Seconds(Clock::now() - spec_.arrival));
}

void GenerationJob::MaybeUnregister() {
  if (num_engine_live_ != 0 || !registry_key_) return;
  for (const Slot& slot : slots_) {
    if (!slot.is_submitted && state_ == State::kRunning) return;  // still starting
  }
  if (state_ == State::kRunning) {
    // Every engine request ended but some choice never finished: cannot happen with a
    // well-behaved engine; never leave the client hanging.
    Fail(InternalError("The engine ended the request without a result."));
  }
  RecordPromptGroups();
  context_->registry.Remove(*registry_key_);
  registry_key_.reset();
  admission_.reset();
}

void GenerationJob::RecordPromptGroups() const {
  std::vector<int64_t> num_choices(spec_.prompt_lengths.size(), 0);
  std::vector<int64_t> most_tokens(spec_.prompt_lengths.size(), 0);
  for (const Slot& slot : slots_) {
    const size_t p = slot.prompt_index;
    if (!slot.is_submitted || p >= num_choices.size()) continue;
    ++num_choices[p];
    most_tokens[p] = std::max(most_tokens[p], slot.num_engine_tokens);
  }
  for (size_t p = 0; p < num_choices.size(); ++p) {
    if (num_choices[p] > 0) context_->metrics.ObservePromptGroup(num_choices[p], most_tokens[p]);
  }
}

Json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

}  // namespace peregrine::server
