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
  while (!launched_.empty()) CollectOldest();
  TakeInbox();
  std::vector<Sequence*> left;
  for (auto& [id, seq] : live_) left.push_back(seq.get());
  for (Sequence* seq : left) Finish(seq, FinishReason::kAbort);
  graveyard_.clear();
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
  EngineEvent ev;
  ev.finish = reason;
  ev.error = error;
  ev.num_prompt_tokens = seq->num_prompt_tokens;
  ev.time = std::chrono::steady_clock::now();
  seq->sink(ev);
  Close(seq);
}

void Engine::Close(Sequence* seq) {
  seq->finished = true;
  scheduler_.remove(seq);
  runner_->Release(seq->id);
  auto it = live_.find(seq->request.id);
  PG_CHECK(it != live_.end() && it->second.get() == seq, "closing a sequence that is not live");
  std::unique_ptr<Sequence> owned = std::move(it->second);
  live_.erase(it);
  (launched_.empty() ? graveyard_ : launched_.back().retired).push_back(std::move(owned));
  std::lock_guard<std::mutex> lock(mu_);
  --num_queued_;
}

void Engine::FailStep(const SchedulerOutput& out, const Status& status) {
  for (const ScheduledChunk& c : out.chunks)
    if (!c.seq->finished) Finish(c.seq, FinishReason::kError, status.ToString());
}

void Engine::Emit(Sequence* seq, SampleResult sample, std::chrono::steady_clock::time_point now) {
  ++seq->num_generated;
  const EngineRequest& r = seq->request;
  std::optional<FinishReason> finish;
  const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), sample.token) != eos_ids_.end();
  const bool is_stop =
      std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), sample.token) != r.stop_token_ids.end();
  const int64_t known = static_cast<int64_t>(seq->tokens.size()) - seq->num_pending;
  if ((is_eos && !r.ignore_eos) || is_stop) finish = FinishReason::kStop;
  else if (seq->num_generated >= r.max_tokens || known >= max_context_) finish = FinishReason::kLength;

  EngineEvent ev;
  ev.token_ids = {sample.token};
  ev.samples = {std::move(sample)};
  ev.num_prompt_tokens = seq->num_prompt_tokens;
  ev.time = now;
  ev.finish = finish;
  seq->sink(ev);
  if (finish) Close(seq);
}

bool Engine::Step() {
  TakeInbox();
  const bool did = runner_->supports_overlap() ? StepOverlapped() : StepSync();
  graveyard_.clear();
  return did;
}

bool Engine::StepSync() {
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
  for (const ScheduledChunk& c : plan.chunks) {                         // post-process, emit
    if (!c.samples) continue;
    SampleResult sample = std::move(samples[row++]);
    c.seq->tokens.push_back(sample.token);
    Emit(c.seq, std::move(sample), now);
  }
  UpdateStats();
  return true;
}

namespace {

// Sampling that counts the request's own tokens (penalties) needs the newest one on the host
// before the next row can be built.
bool CountsOwnTokens(const SamplingParams& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

constexpr int32_t kPlaceholder = -1;

}  // namespace

bool Engine::StepOverlapped() {
  if (!launched_.empty()) {
    bool wait = false;
    for (const LaunchedRow& r : launched_.back().rows)
      wait = wait || (!r.seq->finished && !r.discard && CountsOwnTokens(r.seq->request.sampling));
    if (wait) CollectOldest();
  }
  SchedulerOutput plan = scheduler_.schedule();                        // schedule
  for (Sequence* seq : plan.preempted) runner_->Release(seq->id);
  if (plan.chunks.empty()) {
    const bool collected = !launched_.empty();
    if (collected) CollectOldest();
    UpdateStats();
    return collected;
  }

  std::vector<RunnerChunk> chunks;
  std::vector<RunnerSampling> sampling;
  chunks.reserve(plan.chunks.size());
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* seq = c.seq;
    RunnerChunk rc{seq->id, kv_.get(seq->id).slot, c.first,
                   std::span<const int32_t>(seq->tokens).subspan(static_cast<size_t>(c.first),
                                                                 static_cast<size_t>(c.num_tokens)),
                   c.samples};
    // A pending placeholder is the sequence's last token, sampled by the newest launched step.
    if (seq->num_pending > 0 && c.samples) {
      PG_CHECK(seq->num_pending == 1 && !launched_.empty(), "a placeholder without its launched step");
      rc.fed_from = seq->pending_row;
    }
    chunks.push_back(rc);
    if (c.samples) sampling.push_back({&seq->request.sampling, seq->sampling.get()});
  }
  if (Status s = runner_->Launch(chunks, sampling); !s.ok()) {          // launch
    FailStep(plan, s);
    while (!launched_.empty()) CollectOldest();
    UpdateStats();
    return true;
  }
  scheduler_.on_computed(plan);
  LaunchedStep step;
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.samples) continue;
    Sequence* seq = c.seq;
    seq->tokens.push_back(kPlaceholder);
    ++seq->num_pending;
    seq->pending_row = static_cast<int32_t>(step.rows.size());
    step.rows.push_back({seq, seq->tokens.size() - 1});
    // The step's token ends the sequence by length: plan nothing past it.
    if (seq->num_generated + seq->num_pending >= seq->request.max_tokens ||
        static_cast<int64_t>(seq->tokens.size()) >= max_context_)
      scheduler_.remove(seq);
  }
  step.plan = std::move(plan);
  launched_.push_back(std::move(step));
  while (launched_.size() > 1) CollectOldest();                       // collect the previous step
  UpdateStats();
  return true;
}

void Engine::CollectOldest() {
  LaunchedStep step = std::move(launched_.front());
  launched_.pop_front();
  std::vector<uint8_t> skip(step.rows.size(), 0);
  for (size_t i = 0; i < step.rows.size(); ++i) skip[i] = step.rows[i].seq->finished || step.rows[i].discard;
  std::vector<SampleResult> samples;
  std::vector<uint8_t> refeed_failed;
  if (Status s = runner_->Collect(skip, &samples, &refeed_failed); !s.ok()) {
    FailStep(step.plan, s);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < step.rows.size(); ++i) {                       // post-process, emit
    if (skip[i]) continue;
    Sequence* seq = step.rows[i].seq;
    seq->tokens[step.rows[i].token_index] = samples[i].token;
    --seq->num_pending;
    const bool restart = refeed_failed[i] && seq->num_pending > 0;
    Emit(seq, std::move(samples[i]), now);
    if (restart && !seq->finished) Restart(seq);
  }
  // step.retired goes here: nothing names those sequences any more.
}

void Engine::Restart(Sequence* seq) {
  PG_CHECK(!launched_.empty() && seq->num_pending == 1, "restart without a pending row");
  launched_.back().rows[static_cast<size_t>(seq->pending_row)].discard = true;
  seq->tokens.pop_back();
  seq->num_pending = 0;
  scheduler_.requeue(seq);
  runner_->Release(seq->id);
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
  const DeviceTime device = runner_->device_time();
  stats_.device_busy_seconds = device.busy_s;
  stats_.device_idle_seconds = device.idle_s;
}

void Engine::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (Step()) continue;
    runner_->NoteIdle();
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [this] { return stopping_ || !inbox_.submitted.empty() || !inbox_.aborted.empty(); });
    if (stopping_) return;
  }
}

}  // namespace peregrine
