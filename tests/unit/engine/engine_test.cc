// The engine and scheduler with a fake runner: continuous batching, chunked prefill,
// preemption by recompute, abort, bounded queue, errors.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>
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
  void Release(int64_t seq_id) override { positions.erase(seq_id); }
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_context() const override { return 4096; }
  std::vector<int32_t> eos_token_ids() const override { return {kEos}; }

  std::map<int64_t, int64_t> positions;
  int64_t max_chunk = 0;
  bool fail_next = false;
  bool device = false;
  int64_t device_steps = 0;
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

}  // namespace
}  // namespace peregrine
