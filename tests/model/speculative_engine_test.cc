// Speculative decoding in the engine on the CPU backend, with the trained demo model's MTP
// layer as the drafter: every request's tokens and logprobs are those of the same run
// without speculation, bit for bit (greedy and seeded sampling, penalties, min_tokens, stop
// tokens, logprobs), for MTP chains and DDTree trees, across KV block boundaries with prefix
// caching, under preemption and with overlapped steps; drafts are accepted. Sampled tokens
// of other seeds keep the distribution of decoding without speculation.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "demo_model_golden.h"
#include "speculative_requests.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "runtime/cpu_model_runner.h"

namespace peregrine {
namespace {

using EngineRun = testing::EngineOutcome;
using testing::ExpectIdenticalOutcomes;

std::vector<EngineRequest> Requests() { return testing::SpeculativeRequests(); }

struct RunSetup {
  speculative::SpeculativeConfig spec;
  int64_t kv_tokens = 1 << 14;
  int64_t block_tokens = 128;
  bool prefix_caching = true;
  bool overlap = false;
  int64_t budget = 256;
  int64_t max_num_seqs = 8;
  std::filesystem::path model_dir;  // empty: the demo model
};

// Runs `requests` to the end; with `wave` > 0 the first `wave` of them finish before the
// rest are submitted.
EngineRun RunEngine(const RunSetup& setup, const std::vector<EngineRequest>& requests, size_t wave = 0) {
  EngineRun result;
  auto model = deepseek_v4::Model::Load(setup.model_dir.empty() ? testing::DemoModelDir() : setup.model_dir, 2);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return result;
  CpuRunnerOptions o;
  o.num_slots = static_cast<int32_t>(setup.max_num_seqs);
  o.kv_tokens = setup.kv_tokens;
  o.block_tokens = setup.block_tokens;
  o.prefix_caching = setup.prefix_caching;
  o.snapshot_fraction = 0.5;
  o.overlap = setup.overlap;
  o.speculative = setup.spec;
  auto runner = CpuModelRunner::Create(std::move(model).value(), o);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!runner.ok()) return result;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = setup.budget;
  ec.scheduler.max_num_seqs = setup.max_num_seqs;
  Engine engine(ec, std::move(runner).value());
  return testing::ServeToEnd(engine, requests, wave);
}

speculative::SpeculativeConfig Mtp(int32_t steps) {
  speculative::SpeculativeConfig c;
  c.algorithm = speculative::Algorithm::kMtp;
  c.num_steps = steps;
  return c;
}

speculative::SpeculativeConfig Ddtree(int32_t steps, int32_t tokens, int32_t topk) {
  speculative::SpeculativeConfig c;
  c.algorithm = speculative::Algorithm::kDdtree;
  c.num_steps = steps;
  c.num_draft_tokens = tokens;
  c.topk = topk;
  return c;
}

class SpeculativeEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { reference_ = new EngineRun(RunEngine(RunSetup{}, Requests())); }
  static void TearDownTestSuite() { delete reference_; }
  static const EngineRun& Reference() { return *reference_; }
  static EngineRun* reference_;
};
EngineRun* SpeculativeEngineTest::reference_ = nullptr;

TEST_F(SpeculativeEngineTest, MtpChainsGiveTheNonSpeculativeTokens) {
  for (int32_t steps : {1, 3, 5}) {
    RunSetup s;
    s.spec = Mtp(steps);
    const EngineRun run = RunEngine(s, Requests());
    ExpectIdenticalOutcomes(run, Reference(), "mtp, " + std::to_string(steps) + " steps");
    EXPECT_GT(run.stats.spec_num_drafts, 0);
    // Near max_tokens a row drafts less than num_steps deep.
    EXPECT_LE(run.stats.spec_num_draft_tokens, steps * run.stats.spec_num_drafts);
    EXPECT_GT(run.stats.spec_num_draft_tokens, run.stats.spec_num_drafts * (steps - 1));
    EXPECT_GT(run.stats.spec_num_accepted_tokens, 0) << "the trained MTP layer's drafts are accepted";
    ASSERT_EQ(run.stats.spec_accepted_per_position.size(), static_cast<size_t>(steps));
    int64_t sum = 0;
    for (size_t k = 0; k < run.stats.spec_accepted_per_position.size(); ++k) {
      sum += run.stats.spec_accepted_per_position[k];
      if (k > 0) {
        EXPECT_LE(run.stats.spec_accepted_per_position[k], run.stats.spec_accepted_per_position[k - 1]);
      }
    }
    EXPECT_EQ(sum, run.stats.spec_num_accepted_tokens);
    std::printf("mtp %d steps: %lld drafts, mean accepted %.3f\n", steps,
                static_cast<long long>(run.stats.spec_num_drafts),
                static_cast<double>(run.stats.spec_num_accepted_tokens) / static_cast<double>(run.stats.spec_num_drafts));
  }
}

TEST_F(SpeculativeEngineTest, DdtreeTreesGiveTheNonSpeculativeTokens) {
  RunSetup s;
  s.spec = Ddtree(4, 10, 3);
  const EngineRun run = RunEngine(s, Requests());
  ExpectIdenticalOutcomes(run, Reference(), "ddtree");
  EXPECT_GT(run.stats.spec_num_accepted_tokens, 0);
  std::printf("ddtree: %lld drafts, mean accepted %.3f\n", static_cast<long long>(run.stats.spec_num_drafts),
              static_cast<double>(run.stats.spec_num_accepted_tokens) / static_cast<double>(run.stats.spec_num_drafts));
}

speculative::SpeculativeConfig Ngram(int32_t steps, int32_t min_match, int32_t max_match) {
  speculative::SpeculativeConfig c;
  c.algorithm = speculative::Algorithm::kNgram;
  c.num_steps = steps;
  c.ngram.min_match = min_match;
  c.ngram.max_match = max_match;
  return c;
}

// Prompt lookup: chains copied from each sequence's own earlier tokens (the demo model
// repeats itself, so many are accepted), lossless with and without overlapped steps.
TEST_F(SpeculativeEngineTest, NgramChainsGiveTheNonSpeculativeTokens) {
  for (const auto& [steps, min_match, overlap] : {std::tuple{4, 1, false}, std::tuple{6, 3, true}}) {
    RunSetup s;
    s.spec = Ngram(steps, min_match, 8);
    s.overlap = overlap;
    const EngineRun run = RunEngine(s, Requests());
    const std::string what = "ngram, " + std::to_string(steps) + " steps" + (overlap ? ", overlapped" : "");
    ExpectIdenticalOutcomes(run, Reference(), what);
    EXPECT_GT(run.stats.spec_num_drafts, 0) << what;
    EXPECT_GT(run.stats.spec_num_accepted_tokens, 0) << what;
    EXPECT_LE(run.stats.spec_num_draft_tokens, steps * run.stats.spec_num_drafts) << what;
    std::printf("%s: %lld drafts, %lld draft tokens, mean accepted %.3f\n", what.c_str(),
                static_cast<long long>(run.stats.spec_num_drafts),
                static_cast<long long>(run.stats.spec_num_draft_tokens),
                static_cast<double>(run.stats.spec_num_accepted_tokens) / static_cast<double>(run.stats.spec_num_drafts));
  }
}

// Small blocks (snapshots at boundaries the verify steps cross, kept only where the accepted
// path reaches), a KV pool that forces preemption, overlapped steps, no prefix caching.
TEST_F(SpeculativeEngineTest, LosslessUnderPagingPreemptionAndOverlap) {
  std::vector<EngineRequest> longer = Requests();
  for (EngineRequest& r : longer) r.max_tokens += 110;  // most cross a block while others run
  RunSetup tight;
  tight.spec = Ddtree(3, 6, 2);
  tight.kv_tokens = 384;
  tight.block_tokens = 128;
  tight.budget = 64;
  const EngineRun preempting = RunEngine(tight, longer);
  ExpectIdenticalOutcomes(preempting, RunEngine(RunSetup{}, longer), "tight KV");
  EXPECT_GT(preempting.stats.num_preemptions, 0);

  RunSetup overlapped;
  overlapped.spec = Mtp(3);
  overlapped.overlap = true;
  overlapped.prefix_caching = false;
  ExpectIdenticalOutcomes(RunEngine(overlapped, Requests()), Reference(), "overlap, no prefix caching");
}

// A second wave whose prompts are the first wave's prompts plus their outputs starts from
// the snapshots the speculative steps kept: same tokens as without speculation.
TEST_F(SpeculativeEngineTest, PrefixCacheHitsOnSpeculativeOutputs) {
  std::vector<EngineRequest> first = Requests();
  std::vector<EngineRequest> second = first;
  for (size_t i = 0; i < second.size(); ++i) {
    second[i].id += "b";
    const std::vector<int32_t>& generated = Reference().out[i].tokens;
    second[i].prompt_ids.insert(second[i].prompt_ids.end(), generated.begin(), generated.end());
    second[i].max_tokens = 8;
  }
  std::vector<EngineRequest> both = first;
  both.insert(both.end(), second.begin(), second.end());
  RunSetup plain;
  plain.max_num_seqs = 16;
  RunSetup spec = plain;
  spec.spec = Mtp(4);
  const EngineRun want = RunEngine(plain, both, first.size());
  const EngineRun got = RunEngine(spec, both, first.size());
  ExpectIdenticalOutcomes(got, want, "two waves");
  EXPECT_GT(got.stats.prefix_cache_hits, 0);
}

// Sampled tokens as a distribution, with no shared draws (speculative_requests.h's
// ExpectSampledDistributionKept): N seeded temperature-1 requests decoded with speculation
// and N requests of other seeds decoded without it are two samples of one distribution at
// every generated position; the test must not reject at p = 1e-4, and must reject
// temperature 0.6 against 1 (it can fail). Same-seed runs are compared bit for bit above.
TEST(SpeculativeDistributionTest, SampledTokensKeepThePlainDistribution) {
  RunSetup plain;
  plain.max_num_seqs = 16;
  testing::ExpectSampledDistributionKept(
      [&](const speculative::SpeculativeConfig& spec, const std::vector<EngineRequest>& requests) {
        RunSetup s = plain;
        s.spec = spec;
        return RunEngine(s, requests);
      },
      {{"mtp", Mtp(3)}, {"ddtree", Ddtree(3, 6, 2)}}, "");
}

// The block drafter (DSpark's layout, random weights: tests/fixtures/dspark_tiny) behind
// chains and trees: the same tokens as without speculation.
TEST(BlockDrafterEngineTest, ChainsAndTreesGiveTheNonSpeculativeTokens) {
  const auto dir = testing::DemoModelDir().parent_path().parent_path() / "tests" / "fixtures" / "dspark_tiny" / "model";
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  std::vector<EngineRequest> requests = Requests();
  for (EngineRequest& r : requests) {
    for (int32_t& t : r.prompt_ids) t %= static_cast<int32_t>(config->vocab_size);
    for (int32_t& t : r.stop_token_ids) t %= static_cast<int32_t>(config->vocab_size);
    r.max_tokens = 24;
  }
  RunSetup plain;
  plain.model_dir = dir;
  plain.block_tokens = 16;
  const EngineRun want = RunEngine(plain, requests);
  for (const speculative::SpeculativeConfig& spec : {Mtp(4), Ddtree(4, 8, 2)}) {
    RunSetup s = plain;
    s.spec = spec;
    const EngineRun got = RunEngine(s, requests);
    std::string what = "block drafter, ";
    what += speculative::AlgorithmName(spec.algorithm);
    ExpectIdenticalOutcomes(got, want, what);
    EXPECT_GT(got.stats.spec_num_drafts, 0);
    std::printf("%s: %lld drafts, %lld draft tokens, %lld accepted (random drafter weights)\n", what.c_str(),
                static_cast<long long>(got.stats.spec_num_drafts), static_cast<long long>(got.stats.spec_num_draft_tokens),
                static_cast<long long>(got.stats.spec_num_accepted_tokens));
  }
}

TEST(SpeculativeRunnerTest, RefusesModelsWithoutADrafterAndBadConfigs) {
  auto fixture = testing::DemoModelDir().parent_path().parent_path() / "tests" / "fixtures" / "v4_tiny_gpu" / "model";
  auto model = deepseek_v4::Model::Load(fixture, 1);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  CpuRunnerOptions o;
  o.speculative = Mtp(3);
  auto runner = CpuModelRunner::Create(std::move(model).value(), o);
  EXPECT_EQ(runner.status().code(), StatusCode::kInvalidArgument);
  // The n-gram drafter needs no drafter in the checkpoint.
  auto plain = deepseek_v4::Model::Load(fixture, 1);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  o.speculative = Ngram(3, 1, 4);
  EXPECT_TRUE(CpuModelRunner::Create(std::move(plain).value(), o).ok());
  EXPECT_FALSE(speculative::Validate(Ngram(3, 0, 4)).ok());
  EXPECT_FALSE(speculative::Validate(Ngram(3, 5, 4)).ok());
  speculative::SpeculativeConfig ngram_tree = Ngram(3, 1, 4);
  ngram_tree.num_draft_tokens = 6;
  EXPECT_FALSE(speculative::Validate(ngram_tree).ok());
  EXPECT_EQ(speculative::ParseAlgorithm("ngram").value(), speculative::Algorithm::kNgram);
  speculative::SpeculativeConfig bad = Mtp(3);
  bad.num_draft_tokens = 9;  // a chain verifies steps + 1
  EXPECT_FALSE(speculative::Validate(bad).ok());
  EXPECT_FALSE(speculative::Validate(Mtp(0)).ok());
  EXPECT_FALSE(speculative::Validate(Ddtree(4, 3, 2)).ok());
  EXPECT_TRUE(speculative::Validate(Ddtree(4, 12, 3)).ok());
  EXPECT_FALSE(speculative::ParseAlgorithm("medusa").ok());
}

}  // namespace
}  // namespace peregrine
