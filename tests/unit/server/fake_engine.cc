#include "fake_engine.h"

#include <algorithm>

namespace peregrine::server::testing {

FakeEngine::FakeEngine(int64_t vocab_size, int64_t max_context)
    : vocab_size_(vocab_size), max_context_(max_context) {
  stats_.is_ready = true;
  stats_.kv_capacity_tokens = max_context;
  thread_ = std::thread([this] { Loop(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard lock(mutex_);
    is_stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void FakeEngine::SetScript(std::function<FakeScript(const EngineRequest&)> script) {
  std::lock_guard lock(mutex_);
  script_ = std::move(script);
}

void FakeEngine::SetStats(EngineStats stats) {
  std::lock_guard lock(mutex_);
  stats_ = stats;
}

Status FakeEngine::Submit(EngineRequest request, EventSink sink) {
  std::unique_lock lock(mutex_);
  FakeScript script = script_ ? script_(request) : FakeScript{};
  if (!script.submit_status.ok()) return script.submit_status;
  if (live_.count(request.id) != 0) return InvalidArgument("duplicate request id");
  submitted_.push_back(request);
  const std::string id = request.id;
  const auto now = Clock::now();
  const auto due = now + script.first_delay;
  live_.emplace(id, Live{std::move(request), std::move(sink), std::move(script), now});
  due_.emplace(due, id);
  lock.unlock();
  changed_.notify_all();
  return Status::Ok();
}

void FakeEngine::Abort(const std::string& request_id) {
  std::unique_lock lock(mutex_);
  auto it = live_.find(request_id);
  if (it == live_.end() || it->second.is_aborted) return;
  it->second.is_aborted = true;
  ++num_aborts_;
  due_.emplace(Clock::now(), request_id);
  lock.unlock();
  changed_.notify_all();
}

EngineStats FakeEngine::Stats() const {
  std::lock_guard lock(mutex_);
  EngineStats s = stats_;
  s.num_running = std::max<int64_t>(s.num_running, static_cast<int64_t>(live_.size()));
  return s;
}

int FakeEngine::num_submitted() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(submitted_.size());
}

int FakeEngine::num_aborts() const {
  std::lock_guard lock(mutex_);
  return num_aborts_;
}

int FakeEngine::num_live() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(live_.size());
}

std::vector<EngineRequest> FakeEngine::submitted() const {
  std::lock_guard lock(mutex_);
  return submitted_;
}

bool FakeEngine::WaitFor(std::function<bool()> done, std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

std::vector<SampleResult> FakePromptScores(const std::vector<int32_t>& prompt, int num_top, int64_t vocab_size) {
  std::vector<SampleResult> out;
  for (size_t i = 1; i < prompt.size(); ++i) {
    SampleResult s;
    s.token = prompt[i];
    s.logprob = -0.5f * static_cast<float>(i);
    s.rank = static_cast<int64_t>(i);
    for (int k = 0; k < num_top; ++k)
      s.top_logprobs.push_back({static_cast<int32_t>((prompt[i] + k + 1) % vocab_size), -0.1f - static_cast<float>(k)});
    out.push_back(std::move(s));
  }
  return out;
}

EngineEvent FakeEngine::NextEvent(Live& live, bool* finished) {
  EngineEvent event;
  event.num_prompt_tokens = static_cast<int64_t>(live.request.prompt_ids.size());
  event.time = Clock::now();
  event.arrival_time = live.arrival;
  event.scheduled_time = live.arrival + live.script.queued;
  *finished = false;
  if (live.is_aborted) {
    event.finish = FinishReason::kAbort;
    *finished = true;
    return event;
  }
  const FakeScript& s = live.script;
  if (s.error_after && live.next >= *s.error_after) {
    event.finish = FinishReason::kError;
    event.error = "scripted failure";
    *finished = true;
    return event;
  }
  const EngineRequest& r = live.request;
  if (r.prompt_logprobs >= 0 && !live.has_scored) {
    live.has_scored = true;
    event.prompt_logprobs = FakePromptScores(r.prompt_ids, r.prompt_logprobs, vocab_size_);
  }
  if (r.max_tokens == 0) {  // score only
    event.finish = FinishReason::kLength;
    *finished = true;
    return event;
  }
  for (int i = 0; i < s.tokens_per_event && live.next < s.tokens.size(); ++i) {
    const int32_t token = s.tokens[live.next++];
    event.token_ids.push_back(token);
    if (r.sampling.logprobs >= 0) {
      SampleResult sample{token, -0.25f, {}};
      for (int k = 0; k < r.sampling.logprobs; ++k) {
        sample.top_logprobs.push_back({static_cast<int32_t>((token + k) % vocab_size_),
                                       -0.25f - static_cast<float>(k)});
      }
      event.samples.push_back(std::move(sample));
    }
    const bool is_stop_id = std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
                            r.stop_token_ids.end();
    if (is_stop_id || (token == kEos && !r.ignore_eos)) {
      event.finish = FinishReason::kStop;
    } else if (static_cast<int64_t>(live.next) >= r.max_tokens) {
      event.finish = FinishReason::kLength;
    }
    if (event.finish) break;
  }
  if (!event.finish && live.next >= s.tokens.size() && !s.error_after) event.finish = s.end;
  *finished = event.finish.has_value();
  return event;
}

void FakeEngine::Loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (is_stopping_) return;
    if (due_.empty()) {
      changed_.wait(lock);
      continue;
    }
    const Clock::time_point next = due_.top().first;  // a copy: the queue changes while waiting
    if (next > Clock::now()) {
      changed_.wait_until(lock, next);
      continue;
    }
    const std::string id = due_.top().second;
    due_.pop();
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    bool finished = false;
    EngineEvent event = NextEvent(it->second, &finished);
    EventSink sink = it->second.sink;
    if (finished) {
      live_.erase(it);
    } else {
      due_.emplace(Clock::now() + it->second.script.delay, id);
    }
    lock.unlock();
    sink(event);
    lock.lock();
    changed_.notify_all();
  }
}

}  // namespace peregrine::server::testing
