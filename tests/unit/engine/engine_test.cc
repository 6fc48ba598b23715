// The engine and scheduler with a fake runner: continuous batching, chunked prefill,
// preemption by recompute, abort, bounded queue, errors, overlapped steps.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include "fake_runner.h"

namespace peregrine {
namespace {

using namespace engine_testing;  // NOLINT: the tests' own helpers

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

}  // namespace
}  // namespace peregrine
