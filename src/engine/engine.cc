#include "engine/engine.h"

#include <algorithm>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "runtime/kv_sizing.h"
#include "sampling/token_bitmask.h"

namespace peregrine {

namespace {

KvCacheConfig KvConfigOf(const KvCapacity& c) {
  KvCacheConfig k;
  k.layout = c.layout;
  k.num_slots = c.num_slots;
  k.num_blocks = c.num_blocks;
  k.num_snapshots = c.num_snapshots;
  k.enable_prefix_caching = c.num_snapshots > 0;
  return k;
}

// The fields every event of `seq` carries.
EngineEvent EventOf(const Sequence& seq, std::chrono::steady_clock::time_point now) {
  EngineEvent ev;
  ev.num_prompt_tokens = seq.num_prompt_tokens;
  ev.num_cached_prompt_tokens = std::max<int64_t>(seq.num_cached_tokens, 0);
  ev.time = now;
  ev.arrival_time = seq.arrival;
  ev.scheduled_time = seq.first_scheduled;
  return ev;
}

// What the scheduler takes from the runner: scored rows, speculation, the context.
SchedulerConfig ForRunner(SchedulerConfig config, const ModelRunner& runner) {
  config.max_scored_rows = runner.max_scored_rows();
  config.speculative_lookahead = runner.speculative_lookahead();
  config.speculative_max_nodes = runner.speculative_max_nodes();
  config.max_context = runner.max_context();
  return config;
}

}  // namespace

Engine::Engine(const EngineConfig& config, std::unique_ptr<ModelRunner> runner)
    : config_(config),
      runner_(std::move(runner)),
      vocab_size_(runner_->vocab_size()),
      max_context_(runner_->max_context()),
      eos_ids_(runner_->eos_token_ids()),
      depth_(static_cast<size_t>(std::max(runner_->max_in_flight(), 1))),
      kv_(KvConfigOf(runner_->kv_capacity())),
      scheduler_(ForRunner(config.scheduler, *runner_), kv_),
      mask_batch_(std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 8)) {
  stats_.kv_capacity_tokens = kv_.capacity_tokens();
  stats_.kv_num_blocks = kv_.config().num_blocks;
  stats_.kv_block_tokens = kv_.block_tokens();
  stats_.kv_num_snapshots = kv_.config().num_snapshots;
  stats_.kv_pool_bytes = static_cast<int64_t>(PoolBytes(runner_->kv_capacity()).total());
  stats_.kv_cache_dtype = config.kv_cache_dtype;
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
  if (request.prompt_logprobs > kMaxScoreAlternatives)
    return InvalidArgument("prompt_logprobs must be at most " + std::to_string(kMaxScoreAlternatives));
  if (request.prompt_logprobs >= 0 && runner_->max_scored_rows() <= 0)
    return InvalidArgument("this backend does not compute prompt logprobs");
  if (request.max_tokens < (request.prompt_logprobs >= 0 ? 0 : 1))
    return InvalidArgument("max_tokens must be at least 1");
  if (prompt >= max_context_) return InvalidArgument("the prompt does not fit the context length");
  const int64_t total = std::min(prompt + request.max_tokens, max_context_);
  if (!kv_.fits_when_empty(total)) return InvalidArgument("the request needs more KV cache than the whole pool");

  if (request.export_kv) {
    if (runner_->kv_fingerprint().empty()) return InvalidArgument("this backend cannot export KV for disaggregated serving");
    if (request.max_tokens != 1) return InvalidArgument("a request that exports its KV generates exactly one token");
  }
  if (request.import_kv != nullptr) {
    const TransferredKv& t = *request.import_kv;
    if (t.fingerprint.empty() || t.fingerprint != runner_->kv_fingerprint())
      return InvalidArgument("the transferred KV is in a layout this engine does not use");
    if (t.prompt_ids != request.prompt_ids || t.num_tokens != prompt)
      return InvalidArgument("the transferred KV was computed over another prompt");
    if (t.num_pages() != static_cast<size_t>(kv_.config().layout.BlocksFor(prompt) + 1))
      return InvalidArgument("the transferred KV holds the wrong number of pages");
    if (t.first.token < 0 || t.first.token >= vocab_size_)
      return InvalidArgument("the transferred first token is outside the vocabulary");
    if (request.prompt_logprobs >= 0) return InvalidArgument("prompt logprobs are not transferred with the KV");
  }
  if (request.sampling.min_tokens > 0) {
    // What min_tokens holds back: the stop tokens, EOS among them unless it is ignored.
    std::vector<int32_t>& banned = request.sampling.min_tokens_stop_ids;
    banned = request.stop_token_ids;
    if (!request.ignore_eos) banned.insert(banned.end(), eos_ids_.begin(), eos_ids_.end());
  }
  auto seq = std::make_unique<Sequence>();
  seq->tokens = request.prompt_ids;
  seq->num_prompt_tokens = prompt;
  seq->sampling = std::make_unique<SequenceSamplingState>(request.sampling, request.prompt_ids);
  if (request.grammar != nullptr) {
    seq->matcher = std::make_unique<structured::GrammarMatcher>(request.grammar);
    seq->grammar_active = request.grammar_after < 0;
  }
  // Drafts are verified against the request's own sampling; grammars are not drafted under.
  // A transferred state carries no drafter state: the drafter starts cold at the first
  // decoded position (it restarts there, as after a prefix-cache restore).
  seq->speculates = runner_->speculative_lookahead() > 0 && request.grammar == nullptr;
  seq->request = std::move(request);
  seq->sink = std::move(sink);
  seq->arrival = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("the engine is shutting down");
    if (!stats_.fatal_error.empty()) return Unavailable("the model cannot run any more: " + stats_.fatal_error);
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
    if (raw->request.import_kv != nullptr) {
      importing_.push_back(raw);
    } else {
      scheduler_.add(raw);
    }
  }
  for (const std::string& id : inbox.aborted) {
    auto it = live_.find(id);
    if (it != live_.end()) Finish(it->second.get(), FinishReason::kAbort);
  }
}

void Engine::AttachPromptScores(Sequence* seq, EngineEvent* ev) {
  if (seq->request.prompt_logprobs < 0 || seq->prompt_scores_sent) return;
  seq->prompt_scores_sent = true;
  ev->prompt_logprobs = std::move(seq->prompt_scores);
}

void Engine::AddPromptScores(Sequence* seq, int64_t first, ChunkScores scores) {
  for (size_t i = 0; i < scores.size(); ++i)
    if (first + static_cast<int64_t>(i) == static_cast<int64_t>(seq->prompt_scores.size()))
      seq->prompt_scores.push_back(std::move(scores[i]));
}

void Engine::Finish(Sequence* seq, FinishReason reason, const std::string& error) {
  EngineEvent ev = EventOf(*seq, std::chrono::steady_clock::now());
  ev.finish = reason;
  ev.error = error;
  if (reason == FinishReason::kLength || reason == FinishReason::kStop) AttachPromptScores(seq, &ev);
  seq->sink(ev);
  Close(seq);
}

void Engine::Close(Sequence* seq) {
  seq->finished = true;
  if (seq->request.export_kv) ExportKv(seq);
  std::erase(importing_, seq);
  scheduler_.remove(seq);
  auto it = live_.find(seq->request.id);
  PG_CHECK(it != live_.end() && it->second.get() == seq, "closing a sequence that is not live");
  std::unique_ptr<Sequence> owned = std::move(it->second);
  live_.erase(it);
  (launched_.empty() ? graveyard_ : launched_.back().retired).push_back(std::move(owned));
  std::lock_guard<std::mutex> lock(mu_);
  --num_queued_;
}

void Engine::ExportKv(Sequence* seq) {
  const KvExportSink sink = std::move(seq->request.export_kv);
  seq->request.export_kv = nullptr;
  const int64_t n = seq->num_prompt_tokens;
  if (seq->num_generated != 1 || seq->num_computed != n || seq->num_pending != 0 || !kv_.holds(seq->id)) {
    sink(Unavailable("the request ended before its prompt's KV was computed"));
    return;
  }
  const RequestKv& held = kv_.get(seq->id);
  TransferredKv t;
  t.fingerprint = runner_->kv_fingerprint();
  t.prompt_ids = seq->request.prompt_ids;
  t.num_tokens = n;
  t.num_cached_tokens = std::max<int64_t>(seq->num_cached_tokens, 0);
  t.first = seq->first_sample;
  const auto blocks = std::span(held.blocks).first(static_cast<size_t>(kv_.config().layout.BlocksFor(n)));
  const Status s = runner_->ExportKv(held.slot, blocks, n, &t);
  if (s.ok()) {
    sink(std::move(t));
  } else {
    sink(s);
  }
}

void Engine::AdmitImports() {
  const auto now = std::chrono::steady_clock::now();
  while (!importing_.empty() && kv_.can_admit() && scheduler_.can_run_more()) {
    Sequence* seq = importing_.front();
    const std::shared_ptr<const TransferredKv> t = seq->request.import_kv;
    const int64_t n = t->num_tokens;
    kv_.admit(seq->id, {}, seq->request.cache_salt);  // no prefix lookup: the state comes whole
    if (!kv_.can_append(seq->id, n + 1)) {
      kv_.free(seq->id);
      break;  // in arrival order, once running requests give room back
    }
    importing_.pop_front();
    seq->request.import_kv.reset();
    kv_.append(seq->id, n);
    const RequestKv& held = kv_.get(seq->id);
    const Status s = runner_->ImportKv(held.slot, held.blocks, n, *t);
    if (!s.ok()) {
      // Nothing of the state is usable: the request computes its prompt here instead, or
      // fails when its server's policy says so.
      kv_.free(seq->id);
      ++num_failed_imports_;
      if (seq->request.import_required) {
        LogWarning("request {}: the transferred KV did not load ({})", seq->request.id, s.ToString());
        Finish(seq, FinishReason::kError, "the transferred KV did not load");
        continue;
      }
      LogWarning("request {}: the transferred KV did not load ({}); recomputing its prompt", seq->request.id,
                  s.ToString());
      ++num_recomputed_imports_;
      scheduler_.add(seq);
      continue;
    }
    seq->num_computed = n;
    seq->num_cached_tokens = std::clamp<int64_t>(t->num_cached_tokens, 0, n);  // the prefill side's hits
    seq->first_scheduled = now;
    scheduler_.add_running(seq);
    // The first token was sampled by the prefill engine with this request's parameters: the
    // state moves on as if it had been sampled here.
    seq->sampling->Append(t->first.token);
    seq->sampling->rng().discard(static_cast<unsigned long long>(DrawsPerToken(seq->request.sampling)));
    Emit(seq, {t->first}, now);
  }
}

void Engine::FailStep(const SchedulerOutput& out, const Status& status) {
  for (const ScheduledChunk& c : out.chunks)
    if (!c.seq->finished) Finish(c.seq, FinishReason::kError, status.ToString());
  const Status health = runner_->health();
  if (health.ok()) return;
  // The runner cannot run again: nothing it holds can finish, nothing new may start.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stats_.fatal_error.empty()) return;
    stats_.fatal_error = health.ToString();
    stats_.is_ready = false;
  }
  LogError("engine: the model cannot run any more: {}", health.ToString());
  TakeInbox();
  std::vector<Sequence*> left;
  for (auto& [id, seq] : live_)
    if (!seq->finished) left.push_back(seq.get());
  for (Sequence* seq : left) Finish(seq, FinishReason::kError, "the model cannot run any more: " + health.message());
}

void Engine::Emit(Sequence* seq, std::vector<SampleResult> samples, std::chrono::steady_clock::time_point now) {
  const EngineRequest& r = seq->request;
  std::optional<FinishReason> finish;
  EngineEvent ev = EventOf(*seq, now);
  for (SampleResult& sample : samples) {
    if (seq->matcher != nullptr && !AdvanceGrammar(seq, sample.token)) {
      Finish(seq, FinishReason::kError, "the sampled token breaks the request's grammar");
      return;
    }
    seq->tokens.push_back(sample.token);
    ++seq->num_generated;
    if (seq->num_generated == 1 && r.export_kv) seq->first_sample = sample;
    const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), sample.token) != eos_ids_.end();
    const bool is_stop =
        std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), sample.token) != r.stop_token_ids.end();
    const auto known = static_cast<int64_t>(seq->tokens.size());
    const bool grammar_done = seq->matcher != nullptr && seq->grammar_active && seq->matcher->is_terminated();
    if ((is_eos && !r.ignore_eos) || is_stop || grammar_done) finish = FinishReason::kStop;
    else if (seq->num_generated >= r.max_tokens || known >= max_context_) finish = FinishReason::kLength;
    ev.token_ids.push_back(sample.token);
    ev.samples.push_back(std::move(sample));
    if (finish) break;  // accepted drafts past a stop are dropped
  }
  kv_.commit(seq->id, seq->tokens);
  ev.finish = finish;
  AttachPromptScores(seq, &ev);
  seq->sink(ev);
  if (finish) Close(seq);
}

namespace {

// Sampling that counts the request's own tokens (penalties) needs the newest one on the host
// before the next row can be built.
bool CountsOwnTokens(const SamplingParams& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

// min_tokens bans the stop tokens by the count of tokens on the host: exact only when
// nothing is pending.
bool StillHoldsStops(const Sequence& seq) { return seq.num_generated < seq.request.sampling.min_tokens; }

}  // namespace

bool Engine::Step() {
  TakeInbox();
  AdmitImports();
  if (!launched_.empty()) {
    bool wait = false;
    for (const LaunchedRow& r : launched_.back().rows)
      wait = wait || (!r.seq->finished && !r.discard &&
                      (CountsOwnTokens(r.seq->request.sampling) || StillHoldsStops(*r.seq) || r.seq->speculates ||
                       (r.seq->matcher && !runner_->defers_masks())));
    if (wait) CollectOldest();
  }
  SchedulerOutput plan = scheduler_.schedule();                                  // schedule
  const bool planned = !plan.chunks.empty();
  const bool in_flight = !launched_.empty();
  if (planned) Launch(std::move(plan));                                          // launch
  while (!launched_.empty() && (!planned || launched_.size() >= depth_)) CollectOldest();  // collect, emit
  graveyard_.clear();
  UpdateStats();
  return planned || in_flight;
}

bool Engine::Launch(SchedulerOutput plan) {
  std::vector<RunnerChunk> chunks;
  std::vector<RunnerSampling> sampling;
  std::vector<size_t> deferred;
  std::vector<Sequence*> ready;  // per sampling row: its grammar's mask is known now
  std::vector<ScoredChunk> scored;
  chunks.reserve(plan.chunks.size());
  const auto now = std::chrono::steady_clock::now();
  int64_t num_tokens = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* seq = c.seq;
    if (seq->first_scheduled == std::chrono::steady_clock::time_point{}) seq->first_scheduled = now;
    num_tokens += c.num_tokens;
    const RequestKv& kv = kv_.get(seq->id);
    RunnerChunk rc;
    rc.seq_id = seq->id;
    ChunkView& v = rc.view;
    v.slot = kv.slot;
    v.first_position = c.first;
    v.num_tokens = c.num_tokens;
    // The newest token may still be sampled by the launched step (then the device reads it).
    const int64_t known_end = std::min<int64_t>(c.first + c.num_tokens, static_cast<int64_t>(seq->tokens.size()));
    v.tokens = std::span<const int32_t>(seq->tokens).subspan(static_cast<size_t>(c.first),
                                                             static_cast<size_t>(known_end - c.first));
    v.feeds_last = known_end < c.first + c.num_tokens;
    PG_CHECK(!v.feeds_last || (c.samples && seq->num_pending == 1 && known_end + 1 == c.first + c.num_tokens),
             "a chunk misses a token that no launched step samples");
    v.blocks = kv.blocks;
    v.snapshots = c.snapshots;
    v.restore = c.restore;
    v.needs_logits = c.samples;
    rc.lookahead = c.lookahead;
    rc.history = std::span<const int32_t>(seq->tokens).first(static_cast<size_t>(known_end));
    if (seq->scores_from(c.first)) {
      // Row i scores the token after position first + i, up to the last prompt token.
      const int64_t end = std::min(c.first + c.num_tokens, seq->num_prompt_scores());
      v.all_logits = true;
      rc.scoring.targets = std::span<const int32_t>(seq->tokens).subspan(static_cast<size_t>(c.first + 1),
                                                                         static_cast<size_t>(end - c.first));
      rc.scoring.num_top = seq->request.prompt_logprobs;
      seq->num_scored_launched = std::max(seq->num_scored_launched, end);
      scored.push_back({seq, c.first});
    }
    chunks.push_back(rc);
    if (!c.samples) continue;
    RunnerSampling rs{&seq->request.sampling, seq->sampling.get()};
    // A row fed the token the launched step is sampling waits for it to know its grammar state.
    if (seq->matcher != nullptr && v.feeds_last) {
      rs.mask = RowMask::kDeferred;
      deferred.push_back(sampling.size());
    }
    ready.push_back(seq->matcher != nullptr && !v.feeds_last && seq->grammar_active ? seq : nullptr);
    sampling.push_back(rs);
  }
  const std::vector<const uint32_t*> masks = FillMasks(ready);
  for (size_t i = 0; i < sampling.size(); ++i) {
    if (masks[i] == nullptr) continue;
    sampling[i].mask = RowMask::kReady;
    sampling[i].mask_words = masks[i];
  }
  if (Status s = runner_->Launch(chunks, sampling); !s.ok()) {
    FailStep(plan, s);
    while (!launched_.empty()) CollectOldest();
    return false;
  }
  scheduler_.on_computed(plan);
  CountStepTokens(num_tokens);
  LaunchedStep step;
  for (const ScheduledChunk& c : plan.chunks) {
    // A request that generates nothing ends once its prompt's scores are collected.
    if (c.seq->request.max_tokens == 0 && c.first + c.num_tokens == c.seq->num_tokens()) {
      step.finishing.push_back(c.seq);
      scheduler_.remove(c.seq);
    }
    if (!c.samples) continue;
    Sequence* seq = c.seq;
    ++seq->num_pending;
    step.rows.push_back({seq});
    // The step's token ends the sequence by length: plan nothing past it (a request that
    // exports its KV keeps its pages until it is collected and exported).
    if (seq->num_generated + seq->num_pending >= seq->request.max_tokens || seq->num_tokens() >= max_context_) {
      if (seq->request.export_kv) {
        scheduler_.retire(seq);
      } else {
        scheduler_.remove(seq);
      }
    }
  }
  step.plan = std::move(plan);
  step.deferred = std::move(deferred);
  step.scored = std::move(scored);
  launched_.push_back(std::move(step));
  // Nothing older is in flight: the masks can be computed now.
  if (launched_.size() == 1) SupplyMasks(launched_.back());
  return true;
}

std::vector<const uint32_t*> Engine::FillMasks(std::span<Sequence* const> seqs) {
  const auto words = static_cast<size_t>(TokenMaskWords(vocab_size_));
  if (mask_words_.size() < seqs.size() * words) mask_words_.resize(seqs.size() * words);
  std::vector<const uint32_t*> masks(seqs.size(), nullptr);
  std::vector<structured::GrammarMatcher*> matchers;
  std::vector<int32_t> rows;
  for (size_t k = 0; k < seqs.size(); ++k) {
    if (seqs[k] == nullptr) continue;
    matchers.push_back(seqs[k]->matcher.get());
    rows.push_back(static_cast<int32_t>(k));
    masks[k] = mask_words_.data() + k * words;
  }
  mask_batch_.Fill(matchers, rows, static_cast<int64_t>(seqs.size()), mask_words_.data());
  return masks;
}

void Engine::SupplyMasks(LaunchedStep& step) {
  if (step.deferred.empty()) return;
  std::vector<Sequence*> seqs;  // null: finished, restarting, or still before its grammar
  for (size_t row : step.deferred) {
    const LaunchedRow& r = step.rows[row];
    seqs.push_back(r.seq->finished || r.discard || !r.seq->grammar_active ? nullptr : r.seq);
  }
  step.deferred.clear();
  const std::vector<const uint32_t*> masks = FillMasks(seqs);
  if (Status s = runner_->SupplyMasks(masks); !s.ok()) FailStep(step.plan, s);
}

bool Engine::AdvanceGrammar(Sequence* seq, int32_t token) {
  if (!seq->grammar_active) {
    seq->grammar_active = token == seq->request.grammar_after;
    return true;
  }
  return seq->matcher->Accept(token);
}

void Engine::CollectOldest() {
  SupplyMasks(launched_.front());
  LaunchedStep step = std::move(launched_.front());
  launched_.pop_front();
  std::vector<uint8_t> skip(step.rows.size(), 0);
  for (size_t i = 0; i < step.rows.size(); ++i) skip[i] = step.rows[i].seq->finished || step.rows[i].discard;
  CollectedStep out;
  Status collected = runner_->Collect(skip, &out);
  if (collected.ok() && out.scores.size() != step.scored.size())
    collected = Internal("the runner returned " + std::to_string(out.scores.size()) + " scored chunks, " +
                         std::to_string(step.scored.size()) + " expected");
  if (collected.ok() && (out.samples.size() != skip.size() || out.drafts.size() != skip.size() ||
                         out.refeed_failed.size() != skip.size()))
    collected = Internal("the runner returned a result per row other than one");
  if (!collected.ok()) {
    FailStep(step.plan, collected);
    if (!launched_.empty()) SupplyMasks(launched_.front());
    return;
  }
  for (size_t k = 0; k < out.scores.size(); ++k)
    if (!step.scored[k].seq->finished) AddPromptScores(step.scored[k].seq, step.scored[k].first, std::move(out.scores[k]));
  for (Sequence* seq : step.finishing)
    if (!seq->finished) Finish(seq, FinishReason::kLength);
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < step.rows.size(); ++i) {                       // post-process, emit
    if (skip[i]) continue;
    Sequence* seq = step.rows[i].seq;
    --seq->num_pending;
    std::vector<SampleResult> tokens = std::move(out.drafts[i]);
    // The accepted drafts' state is in the slot; what was reserved past them goes back.
    if (!tokens.empty() || seq->speculates) scheduler_.on_accepted(seq, static_cast<int64_t>(tokens.size()));
    tokens.push_back(std::move(out.samples[i]));
    // A newer launched step read this token from the device: it computed on a wrong one.
    const bool restart = out.refeed_failed[i] && seq->num_pending > 0;
    Emit(seq, std::move(tokens), now);
    if (restart && !seq->finished) Restart(seq);
  }
  // The next step's masks depended on these tokens: its sampling waits for them.
  if (!launched_.empty()) SupplyMasks(launched_.front());
  // step.retired goes here: nothing names those sequences any more.
}

void Engine::Restart(Sequence* seq) {
  PG_CHECK(!launched_.empty() && seq->num_pending == 1, "restart without a pending row");
  for (LaunchedRow& r : launched_.back().rows)
    if (r.seq == seq) r.discard = true;
  seq->num_pending = 0;
  scheduler_.requeue(seq);
}

void Engine::CountStepTokens(int64_t num_tokens) {
  size_t i = 0;
  while (i < kNumStepTokenBounds && num_tokens > kStepTokenBounds[i]) ++i;
  ++step_tokens_.buckets[i];
  step_tokens_.sum += num_tokens;
}

void Engine::UpdateStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.step_tokens = step_tokens_;
  stats_.num_running = scheduler_.num_running();
  stats_.num_waiting = scheduler_.num_waiting() + static_cast<int64_t>(importing_.size());
  stats_.kv_usage = kv_.usage();
  stats_.num_preemptions = scheduler_.num_preemptions();
  stats_.kv_imports_failed = num_failed_imports_;
  stats_.kv_imports_recomputed = num_recomputed_imports_;
  stats_.prefix_cache_queries = scheduler_.num_prefix_query_tokens();
  stats_.prefix_cache_hits = scheduler_.num_prefix_hit_tokens();
  const DeviceTime device = runner_->device_time();
  stats_.device_busy_seconds = device.busy_s;
  stats_.device_idle_seconds = device.idle_s;
  stats_.device_draft_seconds = device.draft_s;
  const RunnerHostTime host = runner_->host_time();
  stats_.runner_launch_seconds = host.launch_s;
  stats_.runner_collect_seconds = host.collect_s;
  stats_.runner_draft_seconds = host.draft_s;
  const SpeculativeCounts spec = runner_->speculative_counts();
  stats_.spec_num_drafts = spec.num_drafts;
  stats_.spec_num_draft_tokens = spec.num_draft_tokens;
  stats_.spec_num_accepted_tokens = spec.num_accepted_tokens;
  stats_.spec_accepted_per_position = spec.accepted_per_position;
  stats_.spec_accepted_per_position.resize(static_cast<size_t>(runner_->speculative_lookahead()), 0);
  stats_.spec_lookahead = runner_->speculative_lookahead();
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
