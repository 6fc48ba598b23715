// The engine on the CPU backend (runtime/cpu_model_runner.h) with the real model on every
// fixture: KV in blocks and slots, preemption, abort, prefix reuse and overlapped steps. The
// CPU forward is batch-invariant (a sequence's logits depend on its own tokens only), so every
// check is exact: tokens and logprobs identical to the reference run, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "runtime/cpu_model_runner.h"
#include "letter_grammar.h"

namespace peregrine {
namespace {

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
  int64_t cached = 0;
};

struct RunOptions {
  int64_t kv_tokens = 1 << 14;
  int64_t block_tokens = 32;
  bool prefix_caching = false;
  bool overlap = false;
  int64_t budget = 48;
  int64_t max_num_seqs = 6;
};

struct RunResult {
  std::vector<Collected> out;
  EngineStats stats;
};

constexpr int kShared = 300;  // prompt tokens every request shares

// Greedy and seeded requests sharing their first kShared tokens, then differing.
std::vector<EngineRequest> Requests(int64_t vocab, int first, int count) {
  std::vector<EngineRequest> out;
  for (int i = first; i < first + count; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);  // (appended: GCC 12 warns falsely on "r" + std::to_string(i))
    for (int t = 0; t < kShared; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 31 + 7) % vocab));
    for (int t = 0; t < 3 + 11 * (i % 4); ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 17 + i * 13 + 1) % vocab));
    r.max_tokens = 10 + 3 * (i % 3);
    r.ignore_eos = true;
    r.sampling.logprobs = 2;
    if (i % 3 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 40 + static_cast<uint64_t>(i);
    } else {
      r.sampling.temperature = 0.0f;
    }
    out.push_back(std::move(r));
  }
  return out;
}

RunResult RunEngine(const std::filesystem::path& fixture, const std::vector<std::vector<EngineRequest>>& waves,
              const RunOptions& ro, const std::vector<std::string>& abort_after_first_token = {}) {
  RunResult result;
  auto config = LoadModelConfig(fixture / "model");
  auto checkpoint = Checkpoint::Open(fixture / "model");
  EXPECT_TRUE(config.ok() && checkpoint.ok());
  if (!config.ok() || !checkpoint.ok()) return result;
  auto model = deepseek_v4::Model::Create(*config, std::move(checkpoint).value(), 2);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return result;
  CpuRunnerOptions o;
  o.num_slots = static_cast<int32_t>(ro.max_num_seqs);
  o.kv_tokens = ro.kv_tokens;
  o.block_tokens = ro.block_tokens;
  o.prefix_caching = ro.prefix_caching;
  o.snapshot_fraction = 0.5;
  o.overlap = ro.overlap;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = ro.budget;
  ec.scheduler.max_num_seqs = ro.max_num_seqs;
  Engine engine(ec, std::make_unique<CpuModelRunner>(std::move(model).value(), o));
  size_t total = 0;
  for (const auto& w : waves) total += w.size();
  result.out.resize(total);
  size_t at = 0;
  for (const auto& wave : waves) {
    for (const EngineRequest& r : wave) {
      const size_t i = at++;
      const bool abort = std::find(abort_after_first_token.begin(), abort_after_first_token.end(), r.id) !=
                         abort_after_first_token.end();
      Status s = engine.Submit(r, [&result, &engine, i, abort, id = r.id](const EngineEvent& ev) {
        Collected& c = result.out[i];
        c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
        for (const SampleResult& x : ev.samples) c.logprobs.push_back(x.logprob);
        c.cached = ev.num_cached_prompt_tokens;
        if (ev.finish) c.finish = ev.finish;
        if (abort && !ev.finish) engine.Abort(id);
      });
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int step = 0; step < 100000 && engine.Step(); ++step) {
    }
  }
  result.stats = engine.Stats();
  return result;
}

void ExpectIdentical(const RunResult& got, const RunResult& want) {
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t i = 0; i < want.out.size(); ++i) {
    EXPECT_EQ(got.out[i].finish, FinishReason::kLength) << i;
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << "request " << i;
    EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs) << "request " << i;
  }
}

class CpuEngineTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  int64_t Vocab() {
    auto config = LoadModelConfig(GetParam() / "model");
    return config.ok() ? config->vocab_size : 0;
  }
};

// The engine's paged run against each sequence run alone on its own state: greedy tokens
// and logprobs identical.
TEST_P(CpuEngineTest, PagedStepsMatchSequencesRunAlone) {
  const std::vector<EngineRequest> requests = Requests(Vocab(), 0, 6);
  const RunResult paged = RunEngine(GetParam(), {requests}, RunOptions{});
  auto config = LoadModelConfig(GetParam() / "model");
  auto checkpoint = Checkpoint::Open(GetParam() / "model");
  ASSERT_TRUE(config.ok() && checkpoint.ok());
  auto model = deepseek_v4::Model::Create(*config, std::move(checkpoint).value(), 2);
  ASSERT_TRUE(model.ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].sampling.temperature != 0.0f) continue;
    deepseek_v4::SequenceState state = (*model)->NewSequence();
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(state, requests[i].prompt_ids, false, &logits).ok());
    std::vector<int32_t> want;
    for (int64_t t = 0; t < requests[i].max_tokens; ++t) {
      const int32_t token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      want.push_back(token);
      const int32_t next[] = {token};
      ASSERT_TRUE((*model)->Forward(state, next, false, &logits).ok());
    }
    EXPECT_EQ(paged.out[i].tokens, want) << "request " << i;
  }
  EXPECT_DOUBLE_EQ(paged.stats.kv_usage, 0.0);
}

TEST_P(CpuEngineTest, PreemptionWhenThePoolsRunOut) {
  const std::vector<EngineRequest> requests = Requests(Vocab(), 0, 6);
  const RunResult ample = RunEngine(GetParam(), {requests}, RunOptions{});
  for (bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    RunOptions tight;
    tight.kv_tokens = 512;  // one of these requests at a time, not two
    tight.prefix_caching = caching;
    const RunResult got = RunEngine(GetParam(), {requests}, tight);
    EXPECT_GT(got.stats.num_preemptions, 0);
    ExpectIdentical(got, ample);
    EXPECT_DOUBLE_EQ(got.stats.kv_usage, 0.0);
  }
}

TEST_P(CpuEngineTest, PrefixReuseGivesTheTokensOfARecompute) {
  const int64_t vocab = Vocab();
  const std::vector<std::vector<EngineRequest>> waves = {Requests(vocab, 0, 1), Requests(vocab, 1, 5),
                                                         Requests(vocab, 6, 3)};
  RunOptions plain;
  RunOptions cached;
  cached.prefix_caching = true;
  const RunResult want = RunEngine(GetParam(), waves, plain);
  const RunResult got = RunEngine(GetParam(), waves, cached);
  ExpectIdentical(got, want);
  EXPECT_EQ(want.stats.prefix_cache_hits, 0);
  // Every later request starts at the deepest block boundary of the shared tokens or further
  // (requests 5 and 6 repeat earlier suffixes: they reach into them).
  const int64_t block = got.stats.kv_block_tokens;
  const int64_t shared = kShared / block * block;
  ASSERT_GT(shared, 0);
  EXPECT_GE(got.stats.prefix_cache_hits, 8 * shared);
  EXPECT_EQ(got.out[0].cached, 0);
  for (size_t i = 1; i < got.out.size(); ++i) EXPECT_GE(got.out[i].cached, shared) << i;
  EXPECT_DOUBLE_EQ(got.stats.kv_usage, 0.0);
}

TEST_P(CpuEngineTest, PrefixReuseAtEveryBlockSize) {
  // Block boundaries inside and at the end of prefill chunks (sizes round up to the window
  // and the ratios).
  const int64_t vocab = Vocab();
  const std::vector<std::vector<EngineRequest>> waves = {Requests(vocab, 0, 2), Requests(vocab, 2, 4)};
  const RunResult want = RunEngine(GetParam(), waves, RunOptions{});
  for (int64_t block : {16, 64}) {
    SCOPED_TRACE("block " + std::to_string(block));
    RunOptions cached;
    cached.block_tokens = block;
    cached.prefix_caching = true;
    cached.budget = 37;  // chunks that do not line up with blocks
    const RunResult got = RunEngine(GetParam(), waves, cached);
    ExpectIdentical(got, want);
    EXPECT_GT(got.stats.prefix_cache_hits, 0);
  }
}

TEST_P(CpuEngineTest, OverlappedStepsGiveTheSynchronousTokens) {
  const std::vector<std::vector<EngineRequest>> waves = {Requests(Vocab(), 0, 6)};
  RunOptions overlap;
  overlap.overlap = true;
  ExpectIdentical(RunEngine(GetParam(), waves, overlap), RunEngine(GetParam(), waves, RunOptions{}));
}

TEST_P(CpuEngineTest, AbortFreesEverythingAndOthersContinue) {
  const std::vector<EngineRequest> requests = Requests(Vocab(), 0, 6);
  const RunResult want = RunEngine(GetParam(), {requests}, RunOptions{});
  RunOptions cached;
  cached.prefix_caching = true;
  const RunResult got = RunEngine(GetParam(), {requests}, cached, {"r1", "r4"});
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == 1 || i == 4) {
      EXPECT_EQ(got.out[i].finish, FinishReason::kAbort) << i;
      continue;
    }
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << i;
    EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs) << i;
  }
  EXPECT_DOUBLE_EQ(got.stats.kv_usage, 0.0);
  EXPECT_EQ(got.stats.num_running, 0);
}

// Structured outputs on the real model: a regex over the fixture vocabulary (id -> a
// letter), masks deferred in overlapped steps and applied at once otherwise, same tokens.
TEST_P(CpuEngineTest, GrammarStepsMatchTheRegexOverlappedOrNot) {
  auto config = LoadModelConfig(GetParam() / "model");
  ASSERT_TRUE(config.ok());
  const int64_t vocab = config->vocab_size;
  auto grammar = testing::CompileLetterRegex(*config, "[a-h]{3,6}(xy|z)");
  ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();

  std::vector<EngineRequest> requests = Requests(vocab, 0, 6);
  for (EngineRequest& r : requests) {
    r.grammar = grammar->grammar;
    r.ignore_eos = false;
    r.max_tokens = 30;
  }
  RunOptions overlap;
  overlap.overlap = true;
  const RunResult got = RunEngine(GetParam(), {requests}, overlap);
  const RunResult want = RunEngine(GetParam(), {requests}, RunOptions{});
  ASSERT_EQ(got.out.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << i;
    EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs) << i;
    ASSERT_EQ(got.out[i].finish, FinishReason::kStop) << i;
    const std::string text = testing::LetterText(got.out[i].tokens);
    EXPECT_TRUE(std::regex_match(text, std::regex("[a-h]{3,6}(xy|z)"))) << i << ": " << text;
  }
}

// Prompt logprobs on the real model: scored in chunks under a small budget, shared with
// other requests' steps, with prefix caching on; every entry exactly ScoreToken over the
// logits of the prompt run alone (the CPU forward is batch-invariant).
TEST_P(CpuEngineTest, PromptLogprobsAreThoseOfThePromptRunAlone) {
  std::vector<EngineRequest> requests = Requests(Vocab(), 0, 4);
  requests[1].prompt_logprobs = 4;
  requests[2].prompt_logprobs = 0;
  requests[2].max_tokens = 0;
  auto config = LoadModelConfig(GetParam() / "model");
  auto checkpoint = Checkpoint::Open(GetParam() / "model");
  ASSERT_TRUE(config.ok() && checkpoint.ok());
  auto model = deepseek_v4::Model::Create(*config, std::move(checkpoint).value(), 2);
  ASSERT_TRUE(model.ok());
  CpuRunnerOptions o;
  o.num_slots = 4;
  o.kv_tokens = 1 << 14;
  o.block_tokens = 32;
  o.prefix_caching = true;
  o.max_scored_rows = 40;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 48;
  ec.scheduler.max_num_seqs = 4;
  Engine engine(ec, std::make_unique<CpuModelRunner>(std::move(model).value(), o));
  std::vector<std::vector<SampleResult>> prompt(requests.size());
  std::vector<std::vector<int32_t>> tokens(requests.size());
  std::vector<std::optional<FinishReason>> finish(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(engine.Submit(requests[i], [&, i](const EngineEvent& ev) {
      if (!ev.prompt_logprobs.empty()) prompt[i] = ev.prompt_logprobs;
      tokens[i].insert(tokens[i].end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finish) finish[i] = ev.finish;
    }).ok());
  }
  for (int step = 0; step < 100000 && engine.Step(); ++step) {
  }
  auto alone = deepseek_v4::Model::Create(*config, std::move(Checkpoint::Open(GetParam() / "model")).value(), 2);
  ASSERT_TRUE(alone.ok());
  const auto vocab = static_cast<size_t>(config->vocab_size);
  for (size_t i : {size_t{1}, size_t{2}}) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(finish[i], FinishReason::kLength);
    EXPECT_EQ(static_cast<int64_t>(tokens[i].size()), requests[i].max_tokens);
    const std::vector<int32_t>& ids = requests[i].prompt_ids;
    deepseek_v4::SequenceState state = (*alone)->NewSequence();
    std::vector<float> logits;
    ASSERT_TRUE((*alone)->Forward(state, ids, /*all_logits=*/true, &logits).ok());
    ASSERT_EQ(prompt[i].size(), ids.size() - 1);
    for (size_t p = 0; p + 1 < ids.size(); ++p) {
      const SampleResult want =
          ScoreToken(std::span<const float>(logits.data() + p * vocab, vocab), ids[p + 1], requests[i].prompt_logprobs);
      const SampleResult& got = prompt[i][p];
      ASSERT_EQ(got.token, want.token) << p;
      EXPECT_EQ(got.logprob, want.logprob) << p;
      EXPECT_EQ(got.rank, want.rank) << p;
      ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size()) << p;
      for (size_t k = 0; k < want.top_logprobs.size(); ++k) {
        EXPECT_EQ(got.top_logprobs[k].token, want.top_logprobs[k].token) << p;
        EXPECT_EQ(got.top_logprobs[k].logprob, want.top_logprobs[k].logprob) << p;
      }
    }
  }
  EXPECT_TRUE(prompt[0].empty());
  EXPECT_TRUE(prompt[3].empty());
  EXPECT_DOUBLE_EQ(engine.Stats().kv_usage, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuEngineTest, ::testing::ValuesIn(testing::FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine
