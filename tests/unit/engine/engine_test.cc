// The engine and scheduler with a fake runner: continuous batching, chunked prefill,
// preemption by recompute, abort, bounded queue, errors.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <random>
#include <thread>

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

class FakeRunner final : public ModelRunner {
 public:
  Status Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) override {
    if (fail_next) return Internal("injected runner failure");
    logits->clear();
    for (const RunnerChunk& c : chunks) {
      int64_t& pos = positions[c.seq_id];
      if (c.first_position == 0) pos = 0;
      if (pos != c.first_position) return Internal("fake runner: out of step");
      pos += static_cast<int64_t>(c.tokens.size());
      max_chunk = std::max<int64_t>(max_chunk, static_cast<int64_t>(c.tokens.size()));
      if (!c.needs_logits) continue;
      std::vector<float> row(kVocab, 0.0f);
      row[static_cast<size_t>(NextToken(c.tokens.back(), pos - 1))] = 5.0f;
      logits->insert(logits->end(), row.begin(), row.end());
    }
    return Status::Ok();
  }
  // With `device` set, the engine must hand sampling over: this fake samples its own logits
  // with the host sampler, as a device sampler must match it token for token.
  bool samples_on_device() const override { return device; }
  Status RunAndSample(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling,
                      std::vector<SampleResult>* results) override {
    std::vector<float> logits;
    PG_RETURN_IF_ERROR(Run(chunks, &logits));
    size_t rows = 0;
    for (const RunnerChunk& c : chunks) rows += c.needs_logits ? 1 : 0;
    if (rows != sampling.size()) return Internal("fake runner: one sampling entry per logits row expected");
    ++device_steps;
    for (size_t i = 0; i < sampling.size(); ++i)
      results->push_back(Sample(std::span<float>(logits.data() + i * kVocab, kVocab), *sampling[i].params,
                                *sampling[i].state));
    return Status::Ok();
  }
  // With `overlap` set, the fake also overlaps steps: Launch runs and samples at once (as if
  // the device were infinitely fast), feeding each fed chunk the previous launch's token; rows
  // whose token `refeed_fails` picks are "finished on the host": the next launch is fed token
  // 0 for them (wrong), as the device feeds a row it gave up on.
  bool supports_overlap() const override { return overlap; }
  Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) override {
    if (launched.size() >= 2) return Internal("fake runner: a third launched step");
    std::vector<std::vector<int32_t>> resolved;
    std::vector<RunnerChunk> run(chunks.begin(), chunks.end());
    for (RunnerChunk& c : run) {
      resolved.emplace_back(c.tokens.begin(), c.tokens.end());
      if (c.fed_from >= 0) {
        if (last_fed.empty() || c.fed_from >= static_cast<int32_t>(last_fed.size()))
          return Internal("fake runner: fed from a row the previous launch does not have");
        resolved.back().back() = last_fed[static_cast<size_t>(c.fed_from)];
        ++fed_chunks;
        fed_seqs.push_back(c.seq_id);
      } else if (!c.tokens.empty() && c.tokens.back() < 0) {
        return Internal("fake runner: a placeholder token that is not fed");
      }
      c.tokens = resolved.back();
      c.fed_from = -1;
    }
    Step step;
    PG_RETURN_IF_ERROR(RunAndSample(run, sampling, &step.results));
    last_fed.clear();
    for (size_t i = 0; i < step.results.size(); ++i) {
      const bool fails = refeed_fails && refeed_fails(step.results[i].token);
      step.refeed_failed.push_back(fails ? 1 : 0);
      step.rng_after.push_back(sampling[i].state->rng());
      step.states.push_back(sampling[i].state);
      last_fed.push_back(fails ? 0 : step.results[i].token);
    }
    launched.push_back(std::move(step));
    max_launched = std::max<int64_t>(max_launched, static_cast<int64_t>(launched.size()));
    return Status::Ok();
  }
  Status Collect(std::span<const uint8_t> skip, std::vector<SampleResult>* results,
                 std::vector<uint8_t>* refeed_failed) override {
    if (launched.empty()) return Internal("fake runner: nothing to collect");
    Step step = std::move(launched.front());
    launched.pop_front();
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
  void Release(int64_t seq_id) override { positions.erase(seq_id); }
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_context() const override { return 4096; }
  std::vector<int32_t> eos_token_ids() const override { return {kEos}; }

  std::map<int64_t, int64_t> positions;
  int64_t max_chunk = 0;
  bool fail_next = false;
  bool device = false;
  int64_t device_steps = 0;
  // Overlap.
  struct Step {
    std::vector<SampleResult> results;
    std::vector<uint8_t> refeed_failed;
    std::vector<std::mt19937_64> rng_after;
    std::vector<SequenceSamplingState*> states;
  };
  bool overlap = false;
  std::function<bool(int32_t)> refeed_fails;
  std::deque<Step> launched;
  std::vector<int32_t> last_fed;
  int64_t fed_chunks = 0, max_launched = 0;
  std::vector<int64_t> fed_seqs;
};

struct Collected {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
  int events = 0;
};

EngineConfig Config(int64_t budget, int32_t csa_pages) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_waiting = 64;
  c.kv_cache.page_size = 4;
  c.kv_cache.num_slots = 8;
  c.kv_cache.num_csa_pages = csa_pages;
  c.kv_cache.num_hca_pages = 64;
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
  Engine engine(Config(/*budget=*/16, /*csa_pages=*/64), std::move(runner));
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
  EXPECT_TRUE(fake->positions.empty());
  EXPECT_EQ(engine.Stats().num_running, 0);
  EXPECT_DOUBLE_EQ(engine.Stats().kv_usage, 0.0);
}

TEST(EngineTest, DeviceSamplingRunnerGivesTheSameTokens) {
  // Greedy and seeded requests through a runner that samples itself and through host sampling.
  auto run = [](bool device, std::vector<std::vector<int32_t>>* prompts) {
    auto runner = std::make_unique<FakeRunner>();
    runner->device = device;
    FakeRunner* fake = runner.get();
    Engine engine(Config(/*budget=*/16, /*csa_pages=*/64), std::move(runner));
    std::vector<Collected> out(4);
    prompts->clear();
    for (int i = 0; i < 4; ++i) {
      prompts->push_back(Prompt(3 + 11 * i, i));
      EngineRequest r = Request(Name("d", i), prompts->back(), 9);
      if (i % 2 == 1) {
        r.sampling.temperature = 0.8f;
        r.sampling.seed = 100 + i;
      }
      EXPECT_TRUE(Submit(engine, std::move(r), out[static_cast<size_t>(i)]).ok());
    }
    RunToCompletion(engine);
    EXPECT_EQ(fake->device_steps > 0, device);
    return out;
  };
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<Collected> host = run(false, &prompts);
  const std::vector<Collected> device = run(true, &prompts);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(device[i].finish.has_value()) << i;
    EXPECT_EQ(device[i].tokens, host[i].tokens) << i;
    if (i % 2 == 0) {
      EXPECT_EQ(device[i].tokens, Expected(prompts[i], 9)) << i;
    }
  }
}

TEST(EngineTest, PreemptionByRecomputeKeepsGreedyOutput) {
  // 10 CSA pages of 16 tokens: four 40-token sequences cannot all grow to 70 tokens.
  Engine engine(Config(64, 10), std::make_unique<FakeRunner>());
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

TEST(EngineTest, StopsOnEosAndStopTokensUnlessIgnored) {
  Engine engine(Config(64, 64), std::make_unique<FakeRunner>());
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

TEST(EngineTest, AbortFreesWithinOneStep) {
  Engine engine(Config(64, 64), std::make_unique<FakeRunner>());
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
  EngineConfig c = Config(64, 4);  // 64 tokens of CSA KV in the whole pool
  c.scheduler.max_num_waiting = 2;
  Engine engine(c, std::make_unique<FakeRunner>());
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
  Engine engine(Config(64, 64), std::move(runner));
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
  Engine engine(Config(32, 32), std::make_unique<FakeRunner>());
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


// Overlapped steps (Engine with a runner that supports_overlap): the same tokens as the
// synchronous engine, whatever the engine learns only after launching the next step.

enum class Mode { kSync, kOverlap };

struct Workload {
  std::vector<EngineRequest> requests;
  EngineConfig config = Config(/*budget=*/16, /*csa_pages=*/64);
  std::function<bool(int32_t)> refeed_fails;
};

struct Outcome {
  std::vector<Collected> out;
  int64_t fed_chunks = 0, max_launched = 0, preemptions = 0;
  std::vector<int64_t> fed_seqs;
  double kv_usage = 0.0;
};

Outcome RunWorkload(const Workload& w, Mode mode) {
  auto runner = std::make_unique<FakeRunner>();
  runner->device = true;
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
  w.config = Config(64, 10);  // four 40-token sequences cannot all grow to 70 tokens
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
  runner->device = true;
  runner->overlap = true;
  Engine engine(Config(64, 64), std::move(runner));
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
  runner->device = true;
  runner->overlap = true;
  FakeRunner* fake = runner.get();
  Engine engine(Config(64, 64), std::move(runner));
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
  runner->device = true;
  runner->overlap = true;
  Engine engine(Config(32, 512), std::move(runner));
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

}  // namespace
}  // namespace peregrine
