// The engine and scheduler with a fake runner: continuous batching, chunked prefill,
// preemption by recompute, abort, bounded queue, errors.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include "base/check.h"
#include "sampling/token_bitmask.h"
#include "structured/grammar_engine.h"

namespace peregrine {
namespace {

constexpr int64_t kVocab = 50;
constexpr int32_t kEos = 1;

// Next token from (previous token, position): recomputation reproduces it exactly. Token 42
// is always followed by EOS.
int32_t NextToken(int32_t last, int64_t position) {
  if (last == 42) return kEos;
  int32_t t = static_cast<int32_t>((last * 7 + position * 3 + 5) % kVocab);
  return t == kEos ? 2 : t;
}

// A runner whose "model" is NextToken: it checks that every chunk continues its slot where
// the last one left it (or restarts it at 0, or at a restored block boundary), samples with the
// host sampler, and keeps each slot's newest token for chunks that feed their last token.
// With `overlap` it reports two steps in flight, as the CUDA runner does; rows whose token
// `refeed_fails` picks are "finished on the host": the slot's token buffer gets 0 (wrong)
// for them, as the device has no token for a row it gave up on.
class FakeRunner final : public ModelRunner {
 public:
  explicit FakeRunner(int32_t num_blocks = 64, int32_t num_snapshots = 0) {
    capacity.layout.block_tokens = 16;
    capacity.layout.first_entry_tokens = 4;
    capacity.layout.paged = {{"entries", 64}};
    capacity.layout.per_request = {{"state", 32}};
    capacity.layout.snapshot_bytes = 16;
    capacity.num_slots = 8;
    capacity.num_blocks = num_blocks;
    capacity.num_snapshots = num_snapshots;
    slot_positions.assign(8, -1);
    slot_tokens.assign(8, -1);
  }

  int max_in_flight() const override { return overlap ? 2 : 1; }
  Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) override {
    if (fail_next) return Internal("injected runner failure");
    if (static_cast<int>(launched.size()) >= max_in_flight()) return Internal("fake runner: too many launched steps");
    Step step;
    std::vector<float> logits;
    for (const RunnerChunk& rc : chunks) {
      const ChunkView& c = rc.view;
      int64_t& pos = slot_positions[static_cast<size_t>(c.slot)];
      if (c.restore >= 0) {
        if (c.first_position % capacity.layout.block_tokens != 0) return Internal("fake runner: restore off a boundary");
        pos = c.first_position;
        ++restores;
      }
      if (c.first_position == 0) pos = 0;
      if (pos != c.first_position) return Internal("fake runner: out of step");
      if (static_cast<int64_t>(c.tokens.size()) + (c.feeds_last ? 1 : 0) != c.num_tokens)
        return Internal("fake runner: chunk tokens and length disagree");
      if (capacity.layout.BlocksFor(c.first_position + c.num_tokens) > static_cast<int64_t>(c.blocks.size()))
        return Internal("fake runner: the block table does not cover the chunk");
      int32_t last = c.tokens.empty() ? -1 : c.tokens.back();
      if (c.feeds_last) {
        last = slot_tokens[static_cast<size_t>(c.slot)];
        if (last < 0) return Internal("fake runner: fed from a slot that sampled nothing");
        ++fed_chunks;
        fed_seqs.push_back(rc.seq_id);
      }
      pos += c.num_tokens;
      max_chunk = std::max<int64_t>(max_chunk, c.num_tokens);
      if (!c.needs_logits) continue;
      std::vector<float> row(kVocab, 0.0f);
      row[static_cast<size_t>(NextToken(last, pos - 1))] = 5.0f;
      logits.insert(logits.end(), row.begin(), row.end());
    }
    if (logits.size() != sampling.size() * kVocab) return Internal("fake runner: one sampling entry per logits row");
    size_t row = 0;
    for (const RunnerChunk& rc : chunks) {
      if (!rc.view.needs_logits) continue;
      std::span<float> row_logits(logits.data() + row * kVocab, kVocab);
      if (sampling[row].mask == RowMask::kDeferred) {
        // Sampled when SupplyMasks brings the mask (its slot's token is unknown until then).
        if (!defers) return Internal("fake runner: a deferred mask it did not ask for");
        step.deferred.push_back({row, rc.view.slot, sampling[row].params, sampling[row].state,
                                 std::vector<float>(row_logits.begin(), row_logits.end())});
        step.results.emplace_back();
        step.refeed_failed.push_back(0);
        step.rng_after.emplace_back();
        step.states.push_back(sampling[row].state);
        slot_tokens[static_cast<size_t>(rc.view.slot)] = -1;
        ++row;
        continue;
      }
      if (sampling[row].mask == RowMask::kReady) {
        ApplyTokenBitmask(row_logits, std::span(sampling[row].mask_words, TokenMaskWords(kVocab)));
        ++ready_masks;
      }
      step.results.push_back(Sample(row_logits, *sampling[row].params, *sampling[row].state));
      const bool fails = refeed_fails && refeed_fails(step.results.back().token);
      step.refeed_failed.push_back(fails ? 1 : 0);
      step.rng_after.push_back(sampling[row].state->rng());
      step.states.push_back(sampling[row].state);
      slot_tokens[static_cast<size_t>(rc.view.slot)] = fails ? 0 : step.results.back().token;
      ++row;
    }
    launched.push_back(std::move(step));
    max_launched = std::max<int64_t>(max_launched, static_cast<int64_t>(launched.size()));
    return Status::Ok();
  }
  Status SupplyMasks(std::span<const uint32_t* const> masks) override {
    if (launched.empty()) return Internal("fake runner: masks with nothing launched");
    Step& step = launched.back();
    if (masks.size() != step.deferred.size()) return Internal("fake runner: one mask per deferred row");
    for (size_t k = 0; k < masks.size(); ++k) {
      Deferred& d = step.deferred[k];
      if (masks[k] != nullptr) ApplyTokenBitmask(d.logits, std::span(masks[k], TokenMaskWords(kVocab)));
      step.results[d.row] = Sample(d.logits, *d.params, *d.state);
      step.rng_after[d.row] = d.state->rng();
      slot_tokens[static_cast<size_t>(d.slot)] = step.results[d.row].token;
      ++deferred_masks;
    }
    step.deferred.clear();
    return Status::Ok();
  }
  bool defers_masks() const override { return defers; }
  Status Collect(std::span<const uint8_t> skip, std::vector<SampleResult>* results,
                 std::vector<uint8_t>* refeed_failed) override {
    if (launched.empty()) return Internal("fake runner: nothing to collect");
    Step step = std::move(launched.front());
    launched.pop_front();
    if (!step.deferred.empty()) return Internal("fake runner: collected before its masks arrived");
    if (skip.size() != step.results.size()) return Internal("fake runner: one skip flag per row expected");
    results->assign(step.results.size(), SampleResult{});
    for (size_t i = 0; i < skip.size(); ++i) {
      if (skip[i]) continue;
      (*results)[i] = step.results[i];
      // The device runner finishes such a row with the RNG as it stood after this step's draw.
      if (step.refeed_failed[i]) step.states[i]->rng() = step.rng_after[i];
    }
    *refeed_failed = step.refeed_failed;
    return Status::Ok();
  }
  KvCapacity kv_capacity() const override { return capacity; }
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_context() const override { return 4096; }
  std::vector<int32_t> eos_token_ids() const override { return {kEos}; }

  KvCapacity capacity;
  std::vector<int64_t> slot_positions;
  std::vector<int32_t> slot_tokens;
  int64_t max_chunk = 0;
  bool fail_next = false;
  int64_t restores = 0;
  struct Deferred {
    size_t row;
    int32_t slot;
    const SamplingParams* params;
    SequenceSamplingState* state;
    std::vector<float> logits;
  };
  struct Step {
    std::vector<Deferred> deferred;
    std::vector<SampleResult> results;
    std::vector<uint8_t> refeed_failed;
    std::vector<std::mt19937_64> rng_after;
    std::vector<SequenceSamplingState*> states;
  };
  bool overlap = false;
  bool defers = true;  // takes deferred grammar masks
  int64_t ready_masks = 0, deferred_masks = 0;
  std::function<bool(int32_t)> refeed_fails;
  std::deque<Step> launched;
  int64_t fed_chunks = 0, max_launched = 0;
  std::vector<int64_t> fed_seqs;
};

struct Collected {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
  int events = 0;
};

EngineConfig Config(int64_t budget) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_waiting = 64;
  return c;
}

EngineRequest Request(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

std::vector<int32_t> Expected(const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<int32_t> out;
  int32_t last = prompt.back();
  for (int64_t i = 0; i < n; ++i) {
    last = NextToken(last, static_cast<int64_t>(prompt.size()) + i - 1);
    out.push_back(last);
    if (last == kEos) break;
  }
  return out;
}

// (Built with append: GCC 12 warns falsely on `"r" + std::to_string(i)`.)
std::string Name(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 13 + seed * 7) % 40);
  return p;
}

void RunToCompletion(Engine& engine, int max_steps = 10000) {
  for (int i = 0; i < max_steps && engine.Step(); ++i) {
  }
}

Status Submit(Engine& engine, EngineRequest r, Collected& out) {
  return engine.Submit(std::move(r), [&out](const EngineEvent& ev) {
    ++out.events;
    out.tokens.insert(out.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) out.finish = ev.finish;
  });
}

TEST(EngineTest, BatchesChunkedPrefillsAndDecodes) {
  auto runner = std::make_unique<FakeRunner>();
  FakeRunner* fake = runner.get();
  runner->capacity.num_blocks = /*csa_pages=*/64;
  Engine engine(Config(/*budget=*/16), std::move(runner));
  std::vector<Collected> out(6);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(5 + 9 * i, i));
    ASSERT_TRUE(Submit(engine, Request(Name("r", i), prompts.back(), 12), out[static_cast<size_t>(i)]).ok());
  }
  RunToCompletion(engine);
  for (int i = 0; i < 6; ++i) {
    const auto& o = out[static_cast<size_t>(i)];
    EXPECT_EQ(o.tokens, Expected(prompts[static_cast<size_t>(i)], 12)) << i;
    ASSERT_TRUE(o.finish.has_value());
  }
  EXPECT_LE(fake->max_chunk, 16);  // prompts longer than the budget were chunked
  EXPECT_EQ(engine.Stats().num_running, 0);
  EXPECT_DOUBLE_EQ(engine.Stats().kv_usage, 0.0);
}

TEST(EngineTest, PrefixCacheStartsSharedPromptsAtTheDeepestSnapshot) {
  // Prompts that share their first 50 tokens: blocks of 16, so a later one starts at 48 from
  // the snapshot there, and a prompt under another salt starts at 0.
  auto runner = std::make_unique<FakeRunner>(/*num_blocks=*/64, /*num_snapshots=*/16);
  FakeRunner* fake = runner.get();
  Engine engine(Config(/*budget=*/64), std::move(runner));
  const std::vector<int32_t> shared = Prompt(50, 3);
  auto prompt = [&](int tail) {
    std::vector<int32_t> p = shared;
    for (int i = 0; i < 5; ++i) p.push_back(3 + (tail * 11 + i) % 40);
    return p;
  };
  Collected first, second, salted;
  ASSERT_TRUE(Submit(engine, Request("first", prompt(1), 6), first).ok());
  RunToCompletion(engine);
  EXPECT_EQ(fake->restores, 0);
  ASSERT_TRUE(Submit(engine, Request("second", prompt(2), 6), second).ok());
  EngineRequest other = Request("salted", prompt(2), 6);
  other.cache_salt = "another tenant";
  ASSERT_TRUE(Submit(engine, std::move(other), salted).ok());
  RunToCompletion(engine);
  EXPECT_EQ(fake->restores, 1);
  EXPECT_EQ(first.tokens, Expected(prompt(1), 6));
  EXPECT_EQ(second.tokens, Expected(prompt(2), 6));
  EXPECT_EQ(salted.tokens, second.tokens);
  const EngineStats stats = engine.Stats();
  EXPECT_EQ(stats.prefix_cache_queries, 3 * 55);
  EXPECT_EQ(stats.prefix_cache_hits, 48);
  EXPECT_DOUBLE_EQ(stats.kv_usage, 0.0);
}

TEST(EngineTest, PreemptionByRecomputeKeepsGreedyOutput) {
  // 10 CSA pages of 16 tokens: four 40-token sequences cannot all grow to 70 tokens.
  Engine engine(Config(64), std::make_unique<FakeRunner>(10));
  std::vector<Collected> out(4);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Prompt(40, i + 10));
    ASSERT_TRUE(Submit(engine, Request(Name("p", i), prompts.back(), 30), out[static_cast<size_t>(i)]).ok());
  }
  RunToCompletion(engine);
  EXPECT_GT(engine.Stats().num_preemptions, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[static_cast<size_t>(i)].tokens, Expected(prompts[static_cast<size_t>(i)], 30)) << i;
}

// A long prompt in prefill leaves room for waiting requests with a long-prefill threshold:
// they are admitted (and their first token comes) before the long prefill ends.
TEST(EngineTest, LongPrefillThresholdAdmitsWaitingRequests) {
  for (int64_t threshold : {0, 8}) {
    EngineConfig c = Config(16);
    c.scheduler.long_prefill_token_threshold = threshold;
    Engine engine(c, std::make_unique<FakeRunner>(64));
    Collected long_one, short_one;
    ASSERT_TRUE(Submit(engine, Request("long", Prompt(400, 1), 2), long_one).ok());
    engine.Step();
    ASSERT_TRUE(Submit(engine, Request("short", Prompt(4, 2), 2), short_one).ok());
    int steps = 0;
    while (short_one.tokens.empty() && steps < 100 && engine.Step()) ++steps;
    if (threshold == 0) {
      EXPECT_FALSE(long_one.tokens.empty());  // waited for the whole long prefill
    } else {
      EXPECT_TRUE(long_one.tokens.empty());   // admitted beside it
    }
    RunToCompletion(engine);
    EXPECT_EQ(long_one.tokens, Expected(Prompt(400, 1), 2));
    EXPECT_EQ(short_one.tokens, Expected(Prompt(4, 2), 2));
  }
}

TEST(EngineTest, StopsOnEosAndStopTokensUnlessIgnored) {
  Engine engine(Config(64), std::make_unique<FakeRunner>(64));
  Collected eos, stop, ignore;
  ASSERT_TRUE(Submit(engine, Request("eos", {5, 42}, 10), eos).ok());
  EngineRequest s = Request("stop", {5, 6}, 10);
  const int32_t first = NextToken(6, 1);
  s.stop_token_ids = {first};
  ASSERT_TRUE(Submit(engine, s, stop).ok());
  EngineRequest ig = Request("ignore", {5, 42}, 3);
  ig.ignore_eos = true;
  ASSERT_TRUE(Submit(engine, ig, ignore).ok());
  RunToCompletion(engine);
  EXPECT_EQ(eos.tokens, std::vector<int32_t>{kEos});
  EXPECT_EQ(eos.finish, FinishReason::kStop);
  EXPECT_EQ(stop.tokens, std::vector<int32_t>{first});
  EXPECT_EQ(stop.finish, FinishReason::kStop);
  EXPECT_EQ(ignore.tokens.size(), 3u);
  EXPECT_EQ(ignore.finish, FinishReason::kLength);
}

// Events carry when a request was queued and when a step first took it: one waiting behind
// a full batch is first scheduled after the one ahead finished. Every launched step's tokens
// land in the tokens-per-step histogram.
TEST(EngineTest, EventsCarryQueueAndScheduleTimesAndStepTokens) {
  EngineConfig c = Config(64);
  c.scheduler.max_num_seqs = 1;
  Engine engine(c, std::make_unique<FakeRunner>(64));
  std::vector<EngineEvent> a, b;
  auto into = [](std::vector<EngineEvent>& out) { return [&out](const EngineEvent& ev) { out.push_back(ev); }; };
  ASSERT_TRUE(engine.Submit(Request("a", Prompt(10, 1), 3), into(a)).ok());
  ASSERT_TRUE(engine.Submit(Request("b", Prompt(5, 2), 2), into(b)).ok());
  RunToCompletion(engine);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 2u);
  for (const EngineEvent& ev : a) {
    EXPECT_EQ(ev.arrival_time, a[0].arrival_time);
    EXPECT_EQ(ev.scheduled_time, a[0].scheduled_time);
  }
  EXPECT_GE(a[0].scheduled_time, a[0].arrival_time);
  EXPECT_LE(a[0].scheduled_time, a[0].time);
  EXPECT_LT(b[0].arrival_time, a.back().time);
  EXPECT_GE(b[0].scheduled_time, a.back().time);  // it waited for a's last step
  // Steps: a's prefill of 10 and two decodes, b's prefill of 5 and one decode.
  const StepTokenCounts steps = engine.Stats().step_tokens;
  EXPECT_EQ(steps.sum, 10 + 1 + 1 + 5 + 1);
  EXPECT_EQ(steps.buckets[0], 3);  // <= 1
  EXPECT_EQ(steps.buckets[1], 1);  // <= 8
  EXPECT_EQ(steps.buckets[2], 1);  // <= 16
}

TEST(EngineTest, AbortFreesWithinOneStep) {
  Engine engine(Config(64), std::make_unique<FakeRunner>(64));
  Collected a, b;
  ASSERT_TRUE(Submit(engine, Request("a", Prompt(30, 1), 900), a).ok());
  ASSERT_TRUE(Submit(engine, Request("b", Prompt(30, 2), 5), b).ok());
  engine.Step();
  engine.Step();
  engine.Abort("a");
  engine.Abort("unknown");
  engine.Step();
  EXPECT_EQ(a.finish, FinishReason::kAbort);
  RunToCompletion(engine);
  EXPECT_EQ(b.finish, FinishReason::kLength);
  EXPECT_DOUBLE_EQ(engine.Stats().kv_usage, 0.0);
  EXPECT_EQ(engine.Stats().num_running, 0);
}

TEST(EngineTest, RejectsWhatCanNeverRun) {
  EngineConfig c = Config(64);
  c.scheduler.max_num_waiting = 2;
  Engine engine(c, std::make_unique<FakeRunner>(4));  // 4 blocks: 67 tokens at most
  Collected sink;
  EXPECT_EQ(Submit(engine, Request("e", {}, 4), sink).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Submit(engine, Request("v", {3, static_cast<int32_t>(kVocab)}, 4), sink).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Submit(engine, Request("m", {3}, 0), sink).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Submit(engine, Request("c", Prompt(4096, 0), 4), sink).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Submit(engine, Request("k", Prompt(60, 0), 10), sink).code(), StatusCode::kInvalidArgument);
  Collected q1, q2, q3;
  EXPECT_TRUE(Submit(engine, Request("q1", {3}, 4), q1).ok());
  EXPECT_TRUE(Submit(engine, Request("q2", {3}, 4), q2).ok());
  EXPECT_EQ(Submit(engine, Request("q3", {3}, 4), q3).code(), StatusCode::kResourceExhausted);
  RunToCompletion(engine);
  EXPECT_TRUE(q1.finish && q2.finish);
  EXPECT_TRUE(Submit(engine, Request("q4", {3}, 4), q3).ok());  // room again
}

TEST(EngineTest, RunnerFailureErrorsTheStepsRequests) {
  auto runner = std::make_unique<FakeRunner>();
  FakeRunner* fake = runner.get();
  runner->capacity.num_blocks = 64;
  Engine engine(Config(64), std::move(runner));
  Collected a;
  ASSERT_TRUE(Submit(engine, Request("a", {3, 4}, 8), a).ok());
  fake->fail_next = true;
  engine.Step();
  EXPECT_EQ(a.finish, FinishReason::kError);
  fake->fail_next = false;
  Collected b;
  ASSERT_TRUE(Submit(engine, Request("a", {3, 4}, 2), b).ok());  // the id is free again
  RunToCompletion(engine);
  EXPECT_EQ(b.finish, FinishReason::kLength);
}

TEST(EngineTest, ThreadedSubmissionsComplete) {
  Engine engine(Config(32), std::make_unique<FakeRunner>(32));
  engine.Start();
  constexpr int kThreads = 4, kPerThread = 8;
  std::vector<Collected> out(kThreads * kPerThread);
  std::mutex mu;
  std::condition_variable done_cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int k = t * kPerThread + i;
        Collected& c = out[static_cast<size_t>(k)];
        Status s = engine.Submit(Request(Name("t", k), Prompt(10 + k, k), 6), [&, k](const EngineEvent& ev) {
          Collected& cc = out[static_cast<size_t>(k)];
          cc.tokens.insert(cc.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
          if (ev.finish) {
            cc.finish = ev.finish;
            std::lock_guard<std::mutex> lock(mu);
            ++done;
            done_cv.notify_all();
          }
        });
        EXPECT_TRUE(s.ok());
        (void)c;
      }
    });
  for (auto& th : threads) th.join();
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(done_cv.wait_for(lock, std::chrono::seconds(20), [&] { return done == kThreads * kPerThread; }));
  lock.unlock();
  engine.Stop();
  for (int k = 0; k < kThreads * kPerThread; ++k)
    EXPECT_EQ(out[static_cast<size_t>(k)].tokens, Expected(Prompt(10 + k, k), 6)) << k;
}


// Overlapped steps (a runner with two steps in flight): the same tokens as the synchronous
// engine, whatever the engine learns only after launching the next step.

enum class Mode { kSync, kOverlap };

struct Workload {
  std::vector<EngineRequest> requests;
  EngineConfig config = Config(/*budget=*/16);
  int32_t num_blocks = 64;
  std::function<bool(int32_t)> refeed_fails;
};

struct Outcome {
  std::vector<Collected> out;
  int64_t fed_chunks = 0, max_launched = 0, preemptions = 0;
  std::vector<int64_t> fed_seqs;
  double kv_usage = 0.0;
};

Outcome RunWorkload(const Workload& w, Mode mode) {
  auto runner = std::make_unique<FakeRunner>(w.num_blocks);
  runner->overlap = mode == Mode::kOverlap;
  runner->refeed_fails = w.refeed_fails;
  FakeRunner* fake = runner.get();
  Engine engine(w.config, std::move(runner));
  Outcome o;
  o.out.resize(w.requests.size());
  for (size_t i = 0; i < w.requests.size(); ++i) EXPECT_TRUE(Submit(engine, w.requests[i], o.out[i]).ok()) << i;
  RunToCompletion(engine);
  o.fed_chunks = fake->fed_chunks;
  o.max_launched = fake->max_launched;
  o.fed_seqs = fake->fed_seqs;
  o.preemptions = engine.Stats().num_preemptions;
  o.kv_usage = engine.Stats().kv_usage;
  EXPECT_TRUE(fake->launched.empty());
  return o;
}

void ExpectSameTokens(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.out.size(), b.out.size());
  for (size_t i = 0; i < a.out.size(); ++i) {
    ASSERT_TRUE(a.out[i].finish.has_value()) << i;
    EXPECT_EQ(a.out[i].finish, b.out[i].finish) << i;
    EXPECT_EQ(a.out[i].tokens, b.out[i].tokens) << i;
    EXPECT_EQ(a.out[i].events, b.out[i].events) << i;
  }
}

Workload MixedWorkload(int n) {
  Workload w;
  for (int i = 0; i < n; ++i) {
    EngineRequest r = Request(Name("o", i), Prompt(3 + 7 * i, i), 5 + 3 * i);
    if (i % 3 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 7 + i;
    }
    if (i % 3 == 2) {
      r.sampling.temperature = 1.3f;
      r.sampling.top_k = 9;
      r.sampling.seed = 70 + i;
    }
    w.requests.push_back(std::move(r));
  }
  return w;
}

TEST(EngineOverlapTest, SameTokensAsSynchronousSteps) {
  const Workload w = MixedWorkload(7);
  const Outcome sync = RunWorkload(w, Mode::kSync);
  const Outcome overlap = RunWorkload(w, Mode::kOverlap);
  ExpectSameTokens(sync, overlap);
  EXPECT_EQ(sync.fed_chunks, 0);
  EXPECT_GT(overlap.fed_chunks, 0);  // decodes really were launched before their token was known
  EXPECT_EQ(overlap.max_launched, 2);
  EXPECT_DOUBLE_EQ(overlap.kv_usage, 0.0);
  for (size_t i = 0; i < w.requests.size(); i += 3)
    EXPECT_EQ(overlap.out[i].tokens, Expected(w.requests[i].prompt_ids, w.requests[i].max_tokens)) << i;
}

TEST(EngineOverlapTest, StopTokensEosAndLengthsEndWhereSynchronousStepsEnd) {
  Workload w;
  w.requests.push_back(Request("eos", {5, 42}, 10));
  EngineRequest stop = Request("stop", {5, 6}, 10);
  stop.stop_token_ids = {NextToken(NextToken(6, 1), 2)};  // the second generated token
  w.requests.push_back(stop);
  EngineRequest ignore = Request("ignore", {5, 42}, 4);
  ignore.ignore_eos = true;
  w.requests.push_back(ignore);
  w.requests.push_back(Request("one", {9, 10, 11}, 1));
  w.requests.push_back(Request("long", Prompt(20, 3), 25));
  const Outcome sync = RunWorkload(w, Mode::kSync);
  const Outcome overlap = RunWorkload(w, Mode::kOverlap);
  ExpectSameTokens(sync, overlap);
  EXPECT_EQ(overlap.out[0].tokens, std::vector<int32_t>{kEos});
  EXPECT_EQ(overlap.out[1].tokens.size(), 2u);
  EXPECT_EQ(overlap.out[1].finish, FinishReason::kStop);
  EXPECT_EQ(overlap.out[2].tokens.size(), 4u);
  EXPECT_EQ(overlap.out[3].finish, FinishReason::kLength);
  EXPECT_DOUBLE_EQ(overlap.kv_usage, 0.0);
}

TEST(EngineOverlapTest, RowsFinishedOnTheHostRestartTheirSequence) {
  // Every sampled token that is 3 mod 5 "was finished on the host": the step launched behind
  // it computed on a wrong token, so the engine must drop that row and recompute.
  Workload w = MixedWorkload(6);
  w.refeed_fails = [](int32_t token) { return token % 5 == 3; };
  const Outcome sync = RunWorkload(w, Mode::kSync);
  const Outcome overlap = RunWorkload(w, Mode::kOverlap);
  ExpectSameTokens(sync, overlap);
  for (size_t i = 0; i < w.requests.size(); i += 3)
    EXPECT_EQ(overlap.out[i].tokens, Expected(w.requests[i].prompt_ids, w.requests[i].max_tokens)) << i;
  // Some failed refeed really happened (a greedy request emits a 3-mod-5 token mid-stream).
  bool hit = false;
  for (const Collected& c : overlap.out)
    for (size_t t = 0; t + 1 < c.tokens.size(); ++t) hit = hit || c.tokens[t] % 5 == 3;
  EXPECT_TRUE(hit);
  EXPECT_DOUBLE_EQ(overlap.kv_usage, 0.0);
}

TEST(EngineOverlapTest, PreemptionKeepsOutput) {
  Workload w;
  w.config = Config(64);
  w.num_blocks = 10;  // four 40-token sequences cannot all grow to 70 tokens
  for (int i = 0; i < 4; ++i) w.requests.push_back(Request(Name("p", i), Prompt(40, i + 10), 30));
  const Outcome overlap = RunWorkload(w, Mode::kOverlap);
  EXPECT_GT(overlap.preemptions, 0);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(overlap.out[i].tokens, Expected(w.requests[i].prompt_ids, 30)) << i;
  EXPECT_DOUBLE_EQ(overlap.kv_usage, 0.0);
}

TEST(EngineOverlapTest, PenalisedRequestsAreNeverPlannedAhead) {
  Workload w = MixedWorkload(4);
  w.requests[1].sampling.presence_penalty = 1.5f;
  w.requests[2].sampling.repetition_penalty = 1.3f;
  const Outcome sync = RunWorkload(w, Mode::kSync);
  const Outcome overlap = RunWorkload(w, Mode::kOverlap);
  ExpectSameTokens(sync, overlap);
  // Sequence ids follow submission order from 1: requests 1 and 2 are never fed.
  for (int64_t id : overlap.fed_seqs) EXPECT_TRUE(id != 2 && id != 3) << id;
}

TEST(EngineOverlapTest, AbortWhileAStepIsLaunched) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = true;
  runner->capacity.num_blocks = 64;
  Engine engine(Config(64), std::move(runner));
  Collected a, b;
  ASSERT_TRUE(Submit(engine, Request("a", Prompt(30, 1), 900), a).ok());
  ASSERT_TRUE(Submit(engine, Request("b", Prompt(30, 2), 6), b).ok());
  for (int i = 0; i < 4; ++i) engine.Step();
  engine.Abort("a");
  engine.Step();
  ASSERT_EQ(a.finish, FinishReason::kAbort);
  const size_t at_abort = a.tokens.size();
  const int events_at_abort = a.events;
  RunToCompletion(engine);
  EXPECT_EQ(a.tokens.size(), at_abort);  // nothing after the abort event
  EXPECT_EQ(a.events, events_at_abort);
  EXPECT_EQ(b.tokens, Expected(Prompt(30, 2), 6));
  EXPECT_EQ(engine.Stats().num_running, 0);
  EXPECT_DOUBLE_EQ(engine.Stats().kv_usage, 0.0);
}

TEST(EngineOverlapTest, LaunchFailureErrorsItsRequestsAndTheEngineGoesOn) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = true;
  FakeRunner* fake = runner.get();
  runner->capacity.num_blocks = 64;
  Engine engine(Config(64), std::move(runner));
  Collected a;
  ASSERT_TRUE(Submit(engine, Request("a", {3, 4}, 8), a).ok());
  engine.Step();
  engine.Step();
  fake->fail_next = true;
  engine.Step();
  fake->fail_next = false;
  EXPECT_EQ(a.finish, FinishReason::kError);
  Collected b;
  ASSERT_TRUE(Submit(engine, Request("b", {3, 4}, 5), b).ok());
  RunToCompletion(engine);
  EXPECT_EQ(b.tokens, Expected({3, 4}, 5));
  EXPECT_TRUE(fake->launched.empty());
}

TEST(EngineOverlapTest, ThreadedEngineStopsCleanlyMidStream) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = true;
  runner->capacity.num_blocks = 512;
  Engine engine(Config(32), std::move(runner));
  engine.Start();
  std::mutex mu;
  std::vector<Collected> out(6);
  for (int k = 0; k < 6; ++k) {
    ASSERT_TRUE(engine
                    .Submit(Request(Name("s", k), Prompt(8 + k, k), 300),
                            [&, k](const EngineEvent& ev) {
                              std::lock_guard<std::mutex> lock(mu);
                              Collected& c = out[static_cast<size_t>(k)];
                              c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
                              if (ev.finish) c.finish = ev.finish;
                            })
                    .ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  engine.Stop();
  for (int k = 0; k < 6; ++k) {
    const Collected& c = out[static_cast<size_t>(k)];
    ASSERT_TRUE(c.finish.has_value()) << k;
    // Whatever was emitted before the stop is the greedy continuation, in order.
    const std::vector<int32_t> want = Expected(Prompt(8 + k, k), static_cast<int64_t>(c.tokens.size()));
    EXPECT_EQ(c.tokens, want) << k;
  }
}

// Structured outputs: a grammar over the fake vocabulary (id -> one letter, EOS the stop token).
std::string TokenText(int32_t id) { return id == kEos ? std::string() : std::string(1, static_cast<char>('a' + id % 26)); }

std::shared_ptr<const structured::CompiledGrammar> Grammar(structured::GrammarKind kind, const std::string& source) {
  static const std::unique_ptr<structured::GrammarEngine> engine = [] {
    structured::GrammarVocabulary v;
    for (int32_t id = 0; id < kVocab; ++id) v.token_bytes.push_back(TokenText(id));
    v.stop_token_ids = {kEos};
    auto e = structured::GrammarEngine::Create(std::move(v));
    PG_CHECK(e.ok(), "grammar engine");
    return std::move(*e);
  }();
  structured::GrammarSpec spec;
  spec.kind = kind;
  spec.source = source;
  auto g = engine->Compile(spec);
  PG_CHECK(g.ok(), "grammar compile");
  return *g;
}

std::string Text(const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens) out += TokenText(t);
  return out;
}

struct GrammarRun {
  std::vector<Collected> out;
  int64_t ready = 0, deferred = 0;
};

// Six requests under `regex`, run to completion.
GrammarRun RunGrammar(bool overlap, bool defers, const std::string& regex, int64_t max_tokens = 40) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = overlap;
  runner->defers = defers;
  FakeRunner* fake = runner.get();
  Engine engine(Config(64), std::move(runner));
  auto grammar = Grammar(structured::GrammarKind::kRegex, regex);
  GrammarRun run;
  run.out.resize(6);
  for (int k = 0; k < 6; ++k) {
    EngineRequest r = Request(Name("g", k), Prompt(5 + k, k), max_tokens);
    r.grammar = grammar;
    EXPECT_TRUE(Submit(engine, std::move(r), run.out[static_cast<size_t>(k)]).ok());
  }
  RunToCompletion(engine);
  run.ready = fake->ready_masks;
  run.deferred = fake->deferred_masks;
  return run;
}

void ExpectMatches(const Collected& c, const std::string& regex, int k) {
  ASSERT_EQ(c.finish, FinishReason::kStop) << k;
  ASSERT_FALSE(c.tokens.empty()) << k;
  EXPECT_EQ(c.tokens.back(), kEos) << k << ": a completed grammar ends on the stop token";
  const std::vector<int32_t> body(c.tokens.begin(), c.tokens.end() - 1);
  EXPECT_TRUE(std::regex_match(Text(body), std::regex(regex))) << k << ": " << Text(body);
}

TEST(EngineGrammarTest, EveryOutputMatchesAndEndsWithTheGrammar) {
  const std::string regex = "[a-f]{3}(x|yz)[0-9]?";
  const GrammarRun run = RunGrammar(/*overlap=*/false, true, regex);
  for (int k = 0; k < 6; ++k) ExpectMatches(run.out[static_cast<size_t>(k)], regex, k);
  EXPECT_GT(run.ready, 0);
  EXPECT_EQ(run.deferred, 0);
}

TEST(EngineGrammarTest, OverlappedStepsDeferTheMasksAndGiveTheSameTokens) {
  const std::string regex = "[a-f]{3}(x|yz)";
  const GrammarRun sync = RunGrammar(false, true, regex);
  const GrammarRun overlapped = RunGrammar(true, true, regex);
  EXPECT_GT(overlapped.deferred, 0) << "decodes planned ahead get their masks once the previous token is known";
  for (int k = 0; k < 6; ++k) {
    ExpectMatches(overlapped.out[static_cast<size_t>(k)], regex, k);
    EXPECT_EQ(overlapped.out[static_cast<size_t>(k)].tokens, sync.out[static_cast<size_t>(k)].tokens) << k;
  }
}

TEST(EngineGrammarTest, ARunnerThatCannotWaitIsCollectedFirst) {
  const std::string regex = "[g-p]{2,5}q";
  const GrammarRun sync = RunGrammar(false, true, regex);
  const GrammarRun collected_first = RunGrammar(true, /*defers=*/false, regex);
  EXPECT_EQ(collected_first.deferred, 0);
  for (int k = 0; k < 6; ++k) {
    ExpectMatches(collected_first.out[static_cast<size_t>(k)], regex, k);
    EXPECT_EQ(collected_first.out[static_cast<size_t>(k)].tokens, sync.out[static_cast<size_t>(k)].tokens) << k;
  }
}

TEST(EngineGrammarTest, MaxTokensCutsAnUnfinishedGrammar) {
  const GrammarRun run = RunGrammar(true, true, "[a-c]{10}", /*max_tokens=*/4);
  for (int k = 0; k < 6; ++k) {
    const Collected& c = run.out[static_cast<size_t>(k)];
    EXPECT_EQ(c.finish, FinishReason::kLength) << k;
    ASSERT_EQ(c.tokens.size(), 4u) << k;
    EXPECT_TRUE(std::regex_match(Text(c.tokens), std::regex("[a-c]{4}"))) << k;
  }
}

TEST(EngineGrammarTest, TheGrammarStartsAfterItsTriggerToken) {
  for (bool overlap : {false, true}) {
    const std::vector<int32_t> prompt = Prompt(9, 2);
    const std::vector<int32_t> free = Expected(prompt, 3);
    ASSERT_EQ(free.size(), 3u);
    ASSERT_NE(free[0], free[2]);
    ASSERT_NE(free[1], free[2]);
    auto runner = std::make_unique<FakeRunner>();
    runner->overlap = overlap;
    Engine engine(Config(64), std::move(runner));
    EngineRequest r = Request("t", prompt, 40);
    r.grammar = Grammar(structured::GrammarKind::kRegex, "[u-w]{4}");
    r.grammar_after = free[2];
    Collected c;
    ASSERT_TRUE(Submit(engine, std::move(r), c).ok());
    RunToCompletion(engine);
    ASSERT_EQ(c.finish, FinishReason::kStop) << overlap;
    ASSERT_EQ(c.tokens.size(), 3u + 4u + 1u) << overlap;
    EXPECT_EQ(std::vector<int32_t>(c.tokens.begin(), c.tokens.begin() + 3), free) << "free until the trigger";
    EXPECT_TRUE(std::regex_match(Text({c.tokens.begin() + 3, c.tokens.end() - 1}), std::regex("[u-w]{4}")));
    EXPECT_EQ(c.tokens.back(), kEos);
  }
}

TEST(EngineGrammarTest, ACompletedGrammarStopsEvenWhenEosIsIgnored) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = true;
  Engine engine(Config(64), std::move(runner));
  EngineRequest r = Request("c", Prompt(6, 1), 40);
  r.grammar = Grammar(structured::GrammarKind::kRegex, "(abc|de)");
  r.ignore_eos = true;
  Collected c;
  ASSERT_TRUE(Submit(engine, std::move(r), c).ok());
  RunToCompletion(engine);
  ExpectMatches(c, "(abc|de)", 0);
}

// min_tokens: the fake model follows 42 with EOS; a prompt ending in 42 would stop at once.
TEST(EngineTest, MinTokensHoldsEosBackForThatManyTokens) {
  for (bool overlap : {false, true}) {
    auto runner = std::make_unique<FakeRunner>();
    runner->overlap = overlap;
    Engine engine(Config(64), std::move(runner));
    Collected plain, held, stop_id;
    ASSERT_TRUE(Submit(engine, Request("plain", {5, 42}, 10), plain).ok());
    EngineRequest r = Request("held", {5, 42}, 10);
    r.sampling.min_tokens = 3;
    ASSERT_TRUE(Submit(engine, std::move(r), held).ok());
    EngineRequest s = Request("stop", {5, 7}, 10);
    s.stop_token_ids = {NextToken(7, 1)};  // its first token would stop it
    s.sampling.min_tokens = 2;
    ASSERT_TRUE(Submit(engine, std::move(s), stop_id).ok());
    RunToCompletion(engine);
    EXPECT_EQ(plain.tokens, std::vector<int32_t>{kEos}) << overlap;
    ASSERT_GE(held.tokens.size(), 4u) << overlap;
    for (size_t i = 0; i < 3; ++i) EXPECT_NE(held.tokens[i], kEos) << overlap << " token " << i;
    EXPECT_TRUE(held.finish.has_value());
    ASSERT_GE(stop_id.tokens.size(), 2u) << overlap;
    EXPECT_NE(stop_id.tokens[0], NextToken(7, 1)) << overlap;
  }
}

}  // namespace
}  // namespace peregrine
