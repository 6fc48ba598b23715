// The engine on the CUDA model runner (runtime/cuda_model_runner.h):
// - on every fixture, overlapped steps (step n+1 launched before step n's tokens reach the
//   host, fed on the device from the slots' token buffer) give exactly the tokens and
//   logprobs of synchronous steps, with decode graphs and without, for greedy, seeded,
//   truncated, logprob and penalised requests. The requests run with ignore_eos and each
//   one's length fixed, so both modes run the same batches and no rounding differs.
// - on the bf16-margin fixtures (docs/decisions/0002), prefix reuse (blocks shared, the slot
//   restored from a snapshot) and preemption (pools too small for every request at once)
//   give the greedy tokens of a run without either; the logprobs differ only by the bf16
//   rounding of other batch shapes (a recomputed or restored prefix runs in other GEMM shapes).
// - grammar masks (structured outputs) deferred to the device in overlapped steps give the
//   tokens of masks passed at launch, each output matching its grammar.
// - with batch-invariant kernels (--enable-deterministic-inference) a request alone and among
//   others, and prefix reuse and preemption, give the same tokens and logprobs bit for bit.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>

#include "backend/cuda/device.h"
#include "engine/engine.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"
#include "letter_grammar.h"

namespace peregrine {
namespace {

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
  std::vector<SampleResult> prompt;  // prompt logprobs
};

std::vector<EngineRequest> Requests(int64_t vocab) {
  std::vector<EngineRequest> out;
  for (int i = 0; i < 7; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);
    for (int t = 0; t < 11 + 13 * i; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 31 + i * 17 + 3) % vocab));
    r.max_tokens = 12 + 3 * i;
    r.ignore_eos = true;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    r.sampling.logprobs = i % 2 == 0 ? 3 : -1;
    switch (i) {
      case 0: r.sampling.temperature = 0.0f; break;
      case 1: r.sampling.temperature = 0.8f; break;
      case 2: r.sampling.temperature = 1.0f; r.sampling.top_p = 0.9f; break;
      case 3: r.sampling.temperature = 1.2f; r.sampling.top_k = 5; break;
      case 4: r.sampling.temperature = 0.7f; r.sampling.min_p = 0.05f; break;
      case 5: r.sampling.temperature = 0.9f; r.sampling.presence_penalty = 0.5f; break;  // never planned ahead
      default: r.sampling.temperature = 0.0f; break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

struct RunOptions {
  bool overlap = true;
  bool graphs = true;
  bool prefix_caching = false;
  int64_t kv_tokens = 8 * 256;  // every sequence's whole context by default
  int64_t block_tokens = 256;
  bool device_sampling = true;
  bool batch_invariant = false;
  speculative::SpeculativeConfig speculative;
};

struct RunResult {
  std::vector<Collected> out;
  EngineStats stats;
};

// Runs `waves` of requests through one engine, each wave submitted once the previous one
// finished (so later waves can reuse what earlier ones cached).
RunResult RunWaves(const std::filesystem::path& fixture, const std::vector<std::vector<EngineRequest>>& waves,
                   const RunOptions& ro) {
  RunResult result;
  const auto dir = fixture / "model";
  auto config = LoadModelConfig(dir);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  if (!config.ok() || !checkpoint.ok()) return result;
  constexpr int64_t kSeqs = 8;
  DeviceModelRegistry registry;
  deepseek_v4::cuda::RegisterDeviceModel(registry);
  auto factory = registry.Find(config->model_type);
  EXPECT_TRUE(factory.ok());
  if (!factory.ok()) return result;
  ExecutorOptions o;
  o.num_slots = kSeqs;
  o.max_tokens = 64;  // a small budget: prompts are chunked and share steps with decodes
  o.max_context = std::min<int64_t>(config->max_position_embeddings, 256);
  o.block_tokens = ro.block_tokens;
  o.kv_tokens = ro.kv_tokens;
  o.prefix_caching = ro.prefix_caching;
  o.snapshot_fraction = 0.5;
  o.max_verify_rows = CudaModelRunner::VerifyRows(ro.speculative, kSeqs);
  o.max_logit_rows = std::max(kSeqs, o.max_verify_rows) + 64;  // prompt logprobs: 64 scored rows per step
  o.batch_invariant = ro.batch_invariant;
  auto executor = DeviceExecutor::Create(*config, **checkpoint, *factory, o);
  EXPECT_TRUE(executor.ok()) << executor.status().ToString();
  if (!executor.ok()) return result;
  if (ro.graphs) {
    EXPECT_TRUE((*executor)->EnableGraphs(kSeqs).ok());
  }
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = o.max_tokens;
  ec.scheduler.max_num_seqs = kSeqs;
  Engine engine(ec, std::make_unique<CudaModelRunner>(std::move(executor).value(), ro.device_sampling, ro.overlap,
                                                     ro.speculative));
  size_t total = 0;
  for (const auto& wave : waves) total += wave.size();
  result.out.resize(total);
  size_t at = 0;
  for (const auto& wave : waves) {
    for (const EngineRequest& r : wave) {
      const size_t i = at++;
      Status s = engine.Submit(r, [&result, i](const EngineEvent& ev) {
        Collected& c = result.out[i];
        c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
        for (const SampleResult& x : ev.samples) c.logprobs.push_back(x.logprob);
        if (!ev.prompt_logprobs.empty()) c.prompt = ev.prompt_logprobs;
        if (ev.finish) {
          c.finish = ev.finish;
          c.error = ev.error;
        }
      });
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int step = 0; step < 20000 && engine.Step(); ++step) {
    }
  }
  result.stats = engine.Stats();
  return result;
}

class CudaEngineTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  std::vector<Collected> Run(bool overlap, bool graphs) {
    const std::vector<EngineRequest> requests = Requests(Vocab());
    RunOptions ro;
    ro.overlap = overlap;
    ro.graphs = graphs;
    const RunResult r = RunWaves(GetParam(), {requests}, ro);
    for (size_t i = 0; i < r.out.size(); ++i) {
      EXPECT_EQ(r.out[i].finish, FinishReason::kLength) << i << " " << r.out[i].error;
      EXPECT_EQ(static_cast<int64_t>(r.out[i].tokens.size()), requests[i].max_tokens) << i;
    }
    return r.out;
  }

  int64_t Vocab() {
    auto config = LoadModelConfig(GetParam() / "model");
    return config.ok() ? config->vocab_size : 0;
  }

  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    vocab_ = Vocab();
  }

  int64_t vocab_ = 0;
};

TEST_P(CudaEngineTest, OverlappedStepsGiveTheSynchronousTokens) {
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "decode graphs" : "eager");
    const std::vector<Collected> sync = Run(/*overlap=*/false, graphs);
    const std::vector<Collected> overlap = Run(/*overlap=*/true, graphs);
    ASSERT_EQ(sync.size(), overlap.size());
    for (size_t i = 0; i < sync.size(); ++i) {
      EXPECT_EQ(overlap[i].tokens, sync[i].tokens) << "request " << i;
      EXPECT_EQ(overlap[i].logprobs, sync[i].logprobs) << "request " << i;
      for (int32_t t : overlap[i].tokens) EXPECT_TRUE(t >= 0 && t < vocab_) << t;
    }
  }
}

// Prompt logprobs scored on the device (the sampler with each row's target forced, ranks
// counted), in steps shared with other requests' prefill chunks and decodes (so the sampled
// rows are moved to the front of the logits), against ScoreToken on the host over the same
// steps' logits (host sampling, which is token for token the device's). One request only
// scores (max_tokens 0). Overlapped steps give the synchronous scores exactly.
TEST_P(CudaEngineTest, PromptLogprobsOnTheDeviceMatchTheHostScoring) {
  std::vector<EngineRequest> requests = Requests(vocab_);
  requests[1].prompt_logprobs = 3;
  requests[4].prompt_logprobs = 0;
  requests[4].max_tokens = 0;
  requests[6].prompt_logprobs = 20;
  RunOptions host, sync, overlap;
  host.device_sampling = false;
  host.overlap = sync.overlap = false;
  const RunResult want = RunWaves(GetParam(), {requests}, host);
  const RunResult got = RunWaves(GetParam(), {requests}, sync);
  const RunResult ahead = RunWaves(GetParam(), {requests}, overlap);
  ASSERT_EQ(want.out.size(), requests.size());
  ASSERT_EQ(got.out.size(), requests.size());
  ASSERT_EQ(ahead.out.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got.out[i].finish, FinishReason::kLength) << got.out[i].error;
    EXPECT_EQ(static_cast<int64_t>(got.out[i].tokens.size()), requests[i].max_tokens);
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens);
    EXPECT_EQ(ahead.out[i].tokens, got.out[i].tokens);
    const size_t n = requests[i].prompt_logprobs >= 0 ? requests[i].prompt_ids.size() - 1 : 0;
    ASSERT_EQ(want.out[i].prompt.size(), n);
    ASSERT_EQ(got.out[i].prompt.size(), n);
    ASSERT_EQ(ahead.out[i].prompt.size(), n);
    for (size_t p = 0; p < n; ++p) {
      const SampleResult& w = want.out[i].prompt[p];
      const SampleResult& g = got.out[i].prompt[p];
      const SampleResult& a = ahead.out[i].prompt[p];
      EXPECT_EQ(g.token, requests[i].prompt_ids[p + 1]);
      EXPECT_EQ(w.token, g.token);
      EXPECT_NEAR(g.logprob, w.logprob, 1e-4 * std::max(1.0f, std::abs(w.logprob))) << p;
      EXPECT_EQ(g.rank, w.rank) << p;
      ASSERT_EQ(g.top_logprobs.size(), static_cast<size_t>(requests[i].prompt_logprobs)) << p;
      ASSERT_EQ(w.top_logprobs.size(), g.top_logprobs.size()) << p;
      for (size_t k = 0; k < g.top_logprobs.size(); ++k) {
        EXPECT_EQ(g.top_logprobs[k].token, w.top_logprobs[k].token) << p << " " << k;
        EXPECT_NEAR(g.top_logprobs[k].logprob, w.top_logprobs[k].logprob, 1e-4f) << p << " " << k;
      }
      EXPECT_EQ(a.logprob, g.logprob) << p;
      EXPECT_EQ(a.rank, g.rank) << p;
    }
  }
}

// Structured outputs: every request under a 12-letter regex over the fixture vocabulary
// (id -> a letter) and max_tokens 13, so the stop token is the 13th and both modes run the
// same batches. Overlapped steps launch their decodes with the masks deferred (the device
// waits for them behind the forward); synchronous steps pass them at launch. Same tokens.
TEST_P(CudaEngineTest, GrammarMasksDeferredOrNotGiveTheSameConformingTokens) {
  auto config = LoadModelConfig(GetParam() / "model");
  ASSERT_TRUE(config.ok());
  auto grammar = testing::CompileLetterRegex(*config, "[a-h]{4}[p-t]{8}");
  ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();
  std::vector<EngineRequest> requests = Requests(vocab_);
  for (EngineRequest& r : requests) {
    r.grammar = grammar->grammar;
    r.max_tokens = 13;
  }
  RunOptions sync_options;
  sync_options.overlap = false;
  const RunResult sync = RunWaves(GetParam(), {requests}, sync_options);
  const RunResult overlap = RunWaves(GetParam(), {requests}, RunOptions{});
  ASSERT_EQ(sync.out.size(), requests.size());
  ASSERT_EQ(overlap.out.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(overlap.out[i].tokens, sync.out[i].tokens) << "request " << i;
    EXPECT_EQ(overlap.out[i].logprobs, sync.out[i].logprobs) << "request " << i;
    ASSERT_EQ(overlap.out[i].finish, FinishReason::kStop) << i << " " << overlap.out[i].error;
    ASSERT_EQ(overlap.out[i].tokens.size(), 13u) << i;
    const std::string text = testing::LetterText(overlap.out[i].tokens);
    EXPECT_TRUE(std::regex_match(text, std::regex("[a-h]{4}[p-t]{8}"))) << i << ": " << text;
  }
}

// --enable-deterministic-inference: each request of Requests() (greedy, seeded, truncated,
// penalised, with logprobs) run alone gets, bit for bit, the tokens and logprobs it gets among
// all the others (its prompt chunked differently, into steps shared with other prefills and
// decodes, decode graphs of other buckets, overlapped steps). The same runs without the flag
// are printed for comparison (their rounding may or may not move a logprob on a fixture).
TEST_P(CudaEngineTest, DeterministicInferenceGivesEveryRequestItsTokensAlone) {
  const std::vector<EngineRequest> requests = Requests(vocab_);
  std::vector<std::vector<EngineRequest>> alone;
  for (const EngineRequest& r : requests) alone.push_back({r});
  for (const bool invariant : {true, false}) {
    RunOptions ro;
    ro.batch_invariant = invariant;
    const RunResult one_by_one = RunWaves(GetParam(), alone, ro);
    const RunResult together = RunWaves(GetParam(), {requests}, ro);
    ASSERT_EQ(one_by_one.out.size(), requests.size());
    ASSERT_EQ(together.out.size(), requests.size());
    int same_tokens = 0, same_logprobs = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(together.out[i].finish, FinishReason::kLength) << i << " " << together.out[i].error;
      ASSERT_EQ(one_by_one.out[i].finish, FinishReason::kLength) << i << " " << one_by_one.out[i].error;
      same_tokens += together.out[i].tokens == one_by_one.out[i].tokens;
      same_logprobs += together.out[i].logprobs == one_by_one.out[i].logprobs;
      if (!invariant) continue;
      EXPECT_EQ(together.out[i].tokens, one_by_one.out[i].tokens) << "request " << i;
      EXPECT_EQ(together.out[i].logprobs, one_by_one.out[i].logprobs) << "request " << i;
    }
    std::printf("%s %s: %d/%zu requests with the same tokens alone and together, %d/%zu the same logprobs\n",
                GetParam().filename().c_str(), invariant ? "batch-invariant" : "default kernels", same_tokens,
                requests.size(), same_logprobs, requests.size());
  }
}

// Speculative decoding with the n-gram drafter: every speculating row's chunk becomes a
// draft chain verified in one step, its nodes sampled with the draws of sequential decoding,
// the accepted prefix kept and the rest rolled back (window rows staged, compressor rows
// restored). With batch-invariant kernels a chain's logits are bit for bit those of decoding
// its tokens one by one, so every request's tokens and logprobs must equal those of the run
// without speculation (greedy, seeded sampling, top-k/p, min-p, penalties). Prompts that
// repeat themselves give the drafter something to copy. The default kernels' agreement is
// printed (rounding of other GEMM shapes may move a token).
TEST_P(CudaEngineTest, NgramSpeculationGivesTheNonSpeculativeTokens) {
  std::vector<EngineRequest> requests = Requests(vocab_);
  for (int i = 0; i < 3; ++i) {
    EngineRequest r;
    r.id = "rep" + std::to_string(i);
    for (int rep = 0; rep < 5; ++rep)
      for (int t = 0; t < 9 + i; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 7 + i * 5 + 11) % vocab_));
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.sampling.seed = 77 + static_cast<uint64_t>(i);
    r.sampling.logprobs = 2;
    r.sampling.temperature = i == 1 ? 0.6f : 0.0f;
    r.sampling.frequency_penalty = i == 2 ? 0.3f : 0.0f;
    requests.push_back(std::move(r));
  }
  speculative::SpeculativeConfig spec;
  spec.algorithm = speculative::Algorithm::kNgram;
  spec.num_steps = 4;
  spec.ngram = {1, 8};
  for (const bool invariant : {true, false}) {
    RunOptions plain;
    plain.batch_invariant = invariant;
    plain.prefix_caching = true;
    plain.block_tokens = 64;  // boundaries with snapshots inside the generated text
    RunOptions speculating = plain;
    speculating.speculative = spec;
    const RunResult want = RunWaves(GetParam(), {requests}, plain);
    const RunResult got = RunWaves(GetParam(), {requests}, speculating);
    ASSERT_EQ(got.out.size(), requests.size());
    int same_tokens = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(got.out[i].finish, FinishReason::kLength) << i << " " << got.out[i].error;
      same_tokens += got.out[i].tokens == want.out[i].tokens;
      if (!invariant) continue;
      EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << "request " << i;
      EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs) << "request " << i;
    }
    EXPECT_GT(got.stats.spec_num_drafts, 0);
    EXPECT_LE(got.stats.spec_num_draft_tokens, spec.num_steps * got.stats.spec_num_drafts);
    std::printf("%s %s: ngram %lld verify steps, %lld draft tokens, %lld accepted (%.3f per step); %d/%zu requests "
                "with the tokens of the run without speculation\n",
                GetParam().filename().c_str(), invariant ? "batch-invariant" : "default kernels",
                static_cast<long long>(got.stats.spec_num_drafts), static_cast<long long>(got.stats.spec_num_draft_tokens),
                static_cast<long long>(got.stats.spec_num_accepted_tokens),
                got.stats.spec_num_drafts > 0 ? static_cast<double>(got.stats.spec_num_accepted_tokens) /
                                                    static_cast<double>(got.stats.spec_num_drafts)
                                              : 0.0,
                same_tokens, requests.size());
  }
}

// Greedy requests that share a 150-token prefix, with logprobs.
std::vector<EngineRequest> SharedPrefix(int64_t vocab, int first, int count) {
  std::vector<EngineRequest> out;
  for (int i = first; i < first + count; ++i) {
    EngineRequest r;
    r.id = "p" + std::to_string(i);
    for (int t = 0; t < 150; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 29 + 5) % vocab));
    for (int t = 0; t < 7 + i; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 13 + i * 7 + 1) % vocab));
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    r.sampling.logprobs = 0;
    out.push_back(std::move(r));
  }
  return out;
}

void ExpectSameGreedy(const RunResult& got, const RunResult& want, double logprob_tolerance) {
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t i = 0; i < want.out.size(); ++i) {
    EXPECT_EQ(got.out[i].finish, FinishReason::kLength) << i << " " << got.out[i].error;
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << "request " << i;
    ASSERT_EQ(got.out[i].logprobs.size(), want.out[i].logprobs.size()) << i;
    for (size_t t = 0; t < want.out[i].logprobs.size(); ++t)
      EXPECT_NEAR(got.out[i].logprobs[t], want.out[i].logprobs[t], logprob_tolerance) << "request " << i << " token " << t;
  }
}

class CudaKvTest : public CudaEngineTest {};

// bf16 rounding of other batch shapes moves a logprob by ~1e-3 here.
constexpr double kLogprobTolerance = 3e-2;

TEST_P(CudaKvTest, PrefixReuseKeepsGreedyTokens) {
  const std::vector<std::vector<EngineRequest>> waves = {SharedPrefix(vocab_, 0, 1), SharedPrefix(vocab_, 1, 5)};
  RunOptions plain;
  plain.block_tokens = 32;
  RunOptions cached = plain;
  cached.prefix_caching = true;
  const RunResult without = RunWaves(GetParam(), waves, plain);
  const RunResult with = RunWaves(GetParam(), waves, cached);
  ExpectSameGreedy(with, without, kLogprobTolerance);
  EXPECT_EQ(without.stats.prefix_cache_hits, 0);
  // Every later request starts at the deepest 32-token boundary of the shared 150 tokens.
  EXPECT_EQ(with.stats.prefix_cache_hits, 5 * 128);
  std::printf("%s prefix reuse: %lld of %lld prompt tokens from the cache, greedy tokens identical\n",
              GetParam().filename().c_str(), static_cast<long long>(with.stats.prefix_cache_hits),
              static_cast<long long>(with.stats.prefix_cache_queries));
}

TEST_P(CudaKvTest, PreemptionKeepsGreedyTokens) {
  // Eight requests of up to ~190 tokens: 256 tokens of blocks hold one or two at a time.
  const std::vector<std::vector<EngineRequest>> waves = {SharedPrefix(vocab_, 0, 8)};
  RunOptions ample;
  ample.block_tokens = 32;
  RunOptions tight = ample;
  tight.kv_tokens = 256;
  for (bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    tight.prefix_caching = caching;
    const RunResult want = RunWaves(GetParam(), waves, ample);
    const RunResult got = RunWaves(GetParam(), waves, tight);
    EXPECT_GT(got.stats.num_preemptions, 0);
    ExpectSameGreedy(got, want, kLogprobTolerance);
    std::printf("%s%s: %lld preemptions, greedy tokens identical to the ample run\n", GetParam().filename().c_str(),
                caching ? " (prefix caching)" : "", static_cast<long long>(got.stats.num_preemptions));
  }
}

// With --enable-deterministic-inference a restored prefix and a preempted sequence's
// recomputed context give the logprobs of the plain run exactly (tolerance 0).
TEST_P(CudaKvTest, DeterministicInferenceKeepsLogprobsExactUnderReuseAndPreemption) {
  RunOptions plain;
  plain.block_tokens = 32;
  plain.batch_invariant = true;
  RunOptions cached = plain;
  cached.prefix_caching = true;
  const std::vector<std::vector<EngineRequest>> waves = {SharedPrefix(vocab_, 0, 1), SharedPrefix(vocab_, 1, 5)};
  const RunResult without = RunWaves(GetParam(), waves, plain);
  const RunResult with = RunWaves(GetParam(), waves, cached);
  EXPECT_EQ(with.stats.prefix_cache_hits, 5 * 128);
  ExpectSameGreedy(with, without, 0.0);
  RunOptions tight = cached;
  tight.kv_tokens = 256;
  const std::vector<std::vector<EngineRequest>> crowd = {SharedPrefix(vocab_, 0, 8)};
  const RunResult ample = RunWaves(GetParam(), crowd, plain);
  const RunResult squeezed = RunWaves(GetParam(), crowd, tight);
  EXPECT_GT(squeezed.stats.num_preemptions, 0);
  ExpectSameGreedy(squeezed, ample, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEngineTest, ::testing::ValuesIn(testing::FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaKvTest, ::testing::ValuesIn(testing::Bf16FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine
