#include "engine/engine.h"

#include <algorithm>

#include "base/check.h"

namespace peregrine {

Engine::Engine(const EngineConfig& config, std::unique_ptr<ModelRunner> runner)
    : config_(config),
      runner_(std::move(runner)),
      vocab_size_(runner_->vocab_size()),
      max_context_(runner_->max_context()),
      eos_ids_(runner_->eos_token_ids()),
      kv_(config.kv_cache),
      scheduler_(config.scheduler, kv_) {
  stats_.kv_capacity_tokens = kv_.capacity_tokens();
  stats_.is_ready = true;
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  PG_CHECK(!thread_.joinable(), "engine started twice");
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stats_.is_ready = false;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  TakeInbox();
  std::vector<Sequence*> left;
  for (auto& [id, seq] : live_) left.push_back(seq.get());
  for (Sequence* seq : left) Finish(seq, FinishReason::kAbort);
}

Status Engine::Submit(EngineRequest request, EventSink sink) {
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt == 0) return InvalidArgument("the prompt is empty");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= vocab_size_) return InvalidArgument("the prompt holds a token id outside the vocabulary");
  if (request.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (prompt >= max_context_) return InvalidArgument("the prompt does not fit the context length");
  const int64_t total = std::min(prompt + request.max_tokens, max_context_);
  if (!kv_.fits_when_empty(total)) return InvalidArgument("the request needs more KV cache than the whole pool");

  auto seq = std::make_unique<Sequence>();
  seq->tokens = request.prompt_ids;
  seq->num_prompt_tokens = prompt;
  seq->sampling = std::make_unique<SequenceSamplingState>(request.sampling, request.prompt_ids);
  seq->request = std::move(request);
  seq->sink = std::move(sink);
  seq->arrival = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("the engine is shutting down");
    if (num_queued_ - stats_.num_running >= config_.scheduler.max_num_waiting)
      return ResourceExhausted("the waiting queue is full");
    ++num_queued_;
    inbox_.submitted.push_back(std::move(seq));
  }
  wake_.notify_one();
  return Status::Ok();
}

void Engine::Abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.aborted.insert(request_id);
  }
  wake_.notify_one();
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::TakeInbox() {
  Inbox inbox;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(inbox, inbox_);
  }
  for (auto& seq : inbox.submitted) {
    seq->id = next_seq_id_++;
    Sequence* raw = seq.get();
    const std::string id = raw->request.id;
    if (live_.count(id)) {
      // A duplicate id would make Abort ambiguous: refuse it through its own sink.
      EngineEvent ev;
      ev.finish = FinishReason::kError;
      ev.error = "duplicate request id";
      ev.time = std::chrono::steady_clock::now();
      raw->sink(ev);
      std::lock_guard<std::mutex> lock(mu_);
      --num_queued_;
      continue;
    }
    live_.emplace(id, std::move(seq));
    scheduler_.add(raw);
  }
  for (const std::string& id : inbox.aborted) {
    auto it = live_.find(id);
    if (it != live_.end()) Finish(it->second.get(), FinishReason::kAbort);
  }
}

void Engine::Finish(Sequence* seq, FinishReason reason, const std::string& error) {
  scheduler_.remove(seq);
  runner_->Release(seq->id);
  EngineEvent ev;
  ev.finish = reason;
  ev.error = error;
  ev.num_prompt_tokens = seq->num_prompt_tokens;
  ev.time = std::chrono::steady_clock::now();
  seq->sink(ev);
  live_.erase(seq->request.id);
  std::lock_guard<std::mutex> lock(mu_);
  --num_queued_;
}

void Engine::FailStep(const SchedulerOutput& out, const Status& status) {
  for (const ScheduledChunk& c : out.chunks) Finish(c.seq, FinishReason::kError, status.ToString());
}

bool Engine::Step() {
  TakeInbox();
  SchedulerOutput plan = scheduler_.schedule();                       // schedule
  for (Sequence* seq : plan.preempted) runner_->Release(seq->id);
  if (plan.chunks.empty()) {
    UpdateStats();
    return false;
  }

  std::vector<RunnerChunk> chunks;
  chunks.reserve(plan.chunks.size());
  for (const ScheduledChunk& c : plan.chunks)
    chunks.push_back({c.seq->id, kv_.get(c.seq->id).slot, c.first,
                      std::span<const int32_t>(c.seq->tokens).subspan(static_cast<size_t>(c.first),
                                                                      static_cast<size_t>(c.num_tokens)),
                      c.samples});
  std::vector<SampleResult> samples;
  if (Status s = RunAndSample(plan, chunks, &samples); !s.ok()) {         // run + sample
    FailStep(plan, s);
    return true;
  }
  scheduler_.on_computed(plan);

  const auto now = std::chrono::steady_clock::now();
  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.samples) continue;
    Sequence* seq = c.seq;
    SampleResult sample = std::move(samples[row++]);

    seq->tokens.push_back(sample.token);                                 // post-process
    ++seq->num_generated;
    const EngineRequest& r = seq->request;
    std::optional<FinishReason> finish;
    const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), sample.token) != eos_ids_.end();
    const bool is_stop = std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), sample.token) !=
                         r.stop_token_ids.end();
    if ((is_eos && !r.ignore_eos) || is_stop) finish = FinishReason::kStop;
    else if (seq->num_generated >= r.max_tokens || static_cast<int64_t>(seq->tokens.size()) >= max_context_)
      finish = FinishReason::kLength;

    EngineEvent ev;                                                      // emit
    ev.token_ids = {sample.token};
    ev.samples = {std::move(sample)};
    ev.num_prompt_tokens = seq->num_prompt_tokens;
    ev.time = now;
    if (!finish) {
      seq->sink(ev);
      continue;
    }
    ev.finish = finish;
    seq->sink(ev);
    scheduler_.remove(seq);
    runner_->Release(seq->id);
    live_.erase(r.id);
    std::lock_guard<std::mutex> lock(mu_);
    --num_queued_;
  }
  UpdateStats();
  return true;
}

Status Engine::RunAndSample(const SchedulerOutput& plan, std::span<const RunnerChunk> chunks,
                            std::vector<SampleResult>* samples) {
  if (runner_->samples_on_device()) {
    std::vector<RunnerSampling> sampling;
    for (const ScheduledChunk& c : plan.chunks)
      if (c.samples) sampling.push_back({&c.seq->request.sampling, c.seq->sampling.get()});
    return runner_->RunAndSample(chunks, sampling, samples);
  }
  std::vector<float> logits;
  PG_RETURN_IF_ERROR(runner_->Run(chunks, &logits));
  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.samples) continue;
    std::span<float> row_logits(logits.data() + row++ * static_cast<size_t>(vocab_size_),
                                static_cast<size_t>(vocab_size_));
    samples->push_back(Sample(row_logits, c.seq->request.sampling, *c.seq->sampling));
  }
  return Status::Ok();
}

void Engine::UpdateStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_running = scheduler_.num_running();
  stats_.num_waiting = scheduler_.num_waiting();
  stats_.kv_usage = kv_.usage();
  stats_.num_preemptions = scheduler_.num_preemptions();
}

void Engine::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (Step()) continue;
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [this] { return stopping_ || !inbox_.submitted.empty() || !inbox_.aborted.empty(); });
    if (stopping_) return;
  }
}

}  // namespace peregrine
