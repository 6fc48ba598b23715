// Speculative decoding on the CUDA runner with the trained demo model (real text, an MTP
// layer trained with the model): the checkpoint's MTP layer drafting chains and DDTree draft
// trees on the device, and the n-gram drafter, against the same requests without speculation. With batch-invariant
// kernels a verified chain's logits are bit for bit those of decoding its tokens one by one,
// so every request's tokens and logprobs must be the same (speculative_requests.h: greedy,
// seeded sampling with top-p, repetition and frequency penalties, min_tokens, stop tokens,
// logprobs). The MTP drafts must be accepted at a rate near the CPU drafter's (a drafter that
// followed the wrong rows or positions would propose noise). Sampled tokens of other seeds
// keep the plain distribution. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/device.h"
#include "cuda_model_util.h"
#include "cuda_serve.h"
#include "demo_model_golden.h"
#include "golden.h"
#include "speculative_requests.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/model.h"
#include "runtime/cpu_model_runner.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"

namespace peregrine {
namespace {

using Outcome = testing::EngineOutcome;
using testing::ExpectIdenticalOutcomes;
using testing::MeanAccepted;

Outcome Serve(std::unique_ptr<ModelRunner> runner, const std::vector<EngineRequest>& requests) {
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 128;
  ec.scheduler.max_num_seqs = 8;
  Engine engine(ec, std::move(runner));
  return testing::ServeToEnd(engine, requests);
}

Outcome Serve(std::unique_ptr<ModelRunner> runner) { return Serve(std::move(runner), testing::SpeculativeRequests()); }

Outcome RunCuda(const speculative::SpeculativeConfig& spec, bool graphs, bool prefix_caching = true,
                const std::vector<EngineRequest>& requests = testing::SpeculativeRequests()) {
  testing::CudaServeOptions o;
  o.graphs = graphs;
  o.prefix_caching = prefix_caching;
  return testing::ServeOnCuda(testing::DemoModelDir(), spec, o, requests);
}

speculative::SpeculativeConfig Spec(speculative::Algorithm algorithm, int32_t steps, int32_t draft_tokens = 0,
                                     int32_t topk = 4) {
  speculative::SpeculativeConfig c;
  c.algorithm = algorithm;
  c.num_steps = steps;
  c.num_draft_tokens = draft_tokens;
  c.topk = topk;
  return c;
}

class CudaSpeculativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaSpeculativeTest, MtpAndNgramChainsGiveTheNonSpeculativeTokens) {
  const Outcome plain = RunCuda({}, /*graphs=*/true);
  // The CPU drafter's acceptance on the same requests, for comparison.
  auto model = deepseek_v4::Model::Load(testing::DemoModelDir(), 2);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  CpuRunnerOptions co;
  co.num_slots = 8;
  co.kv_tokens = 8 * 512;
  co.block_tokens = 64;
  co.speculative = Spec(speculative::Algorithm::kMtp, 3);
  auto cpu_runner = CpuModelRunner::Create(std::move(model).value(), co);
  ASSERT_TRUE(cpu_runner.ok()) << cpu_runner.status().ToString();
  const Outcome cpu = Serve(std::move(cpu_runner).value());
  std::printf("CPU mtp 3 steps: %lld verify steps, mean accepted %.3f\n", static_cast<long long>(cpu.stats.spec_num_drafts),
              MeanAccepted(cpu.stats));
  for (const auto& [algorithm, steps, graphs] :
       {std::tuple{speculative::Algorithm::kMtp, 3, true}, std::tuple{speculative::Algorithm::kMtp, 5, false},
        std::tuple{speculative::Algorithm::kNgram, 4, true}}) {
    const std::string what = std::string(speculative::AlgorithmName(algorithm)) + " " + std::to_string(steps) +
                             " steps" + (graphs ? ", graphs" : ", eager");
    const Outcome got = RunCuda(Spec(algorithm, steps), graphs);
    ExpectIdenticalOutcomes(got, plain, what);
    EXPECT_GT(got.stats.spec_num_drafts, 0) << what;
    std::printf("CUDA %s: %lld verify steps, %lld draft tokens, mean accepted %.3f\n", what.c_str(),
                static_cast<long long>(got.stats.spec_num_drafts),
                static_cast<long long>(got.stats.spec_num_draft_tokens), MeanAccepted(got.stats));
    if (algorithm == speculative::Algorithm::kMtp && steps == 3) {
      // The same layer drafts on both backends; bf16 rounding may move a near-tie.
      EXPECT_GT(MeanAccepted(got.stats), 0.75 * MeanAccepted(cpu.stats)) << what;
    }
  }
}

// DDTree on the device: the MTP chain's top-k per depth grows a best-first tree under the
// node budget; every node is verified in one step (its own path only), the accepted root path
// is kept. Tokens and logprobs must equal the plain run's, with graphs and eagerly, and the
// trees must accept tokens at a rate near the chain's (best first under a budget, a tree may
// trade the chain's deepest node for likelier siblings).
TEST_F(CudaSpeculativeTest, DdtreeTreesGiveTheNonSpeculativeTokens) {
  const Outcome plain = RunCuda({}, /*graphs=*/true);
  const Outcome chain = RunCuda(Spec(speculative::Algorithm::kMtp, 3), /*graphs=*/true);
  ExpectIdenticalOutcomes(chain, plain, "mtp 3 steps");
  for (const auto& [steps, draft_tokens, topk, graphs] :
       {std::tuple{3, 8, 4, true}, std::tuple{3, 8, 4, false}, std::tuple{4, 12, 2, true},
        std::tuple{3, 0, 1, true}}) {
    const std::string what = "ddtree " + std::to_string(steps) + " steps, " + std::to_string(draft_tokens) +
                             " tokens, top-" + std::to_string(topk) + (graphs ? ", graphs" : ", eager");
    const Outcome got = RunCuda(Spec(speculative::Algorithm::kDdtree, steps, draft_tokens, topk), graphs);
    ExpectIdenticalOutcomes(got, plain, what);
    EXPECT_GT(got.stats.spec_num_drafts, 0) << what;
    std::printf("CUDA %s: %lld verify steps, %lld draft tokens, mean accepted %.3f (chain: %.3f)\n", what.c_str(),
                static_cast<long long>(got.stats.spec_num_drafts),
                static_cast<long long>(got.stats.spec_num_draft_tokens), MeanAccepted(got.stats),
                MeanAccepted(chain.stats));
    // A tree that drafted noise (wrong rows, wrong candidates) would accept far less.
    EXPECT_GT(MeanAccepted(got.stats), 0.75 * MeanAccepted(chain.stats)) << what;
  }
}

// Sampled tokens as a distribution on the device, with no shared draws (as the CPU test in
// speculative_engine_test): the tokens of seeded temperature-1 requests with MTP chains and
// DDTree trees and of other seeds without speculation must pass a two-sample chi-square test
// at every generated position (p > 1e-4); temperature 0.6 against 1 must fail it.
TEST_F(CudaSpeculativeTest, SampledTokensKeepThePlainDistribution) {
  testing::ExpectSampledDistributionKept(
      [](const speculative::SpeculativeConfig& spec, const std::vector<EngineRequest>& requests) {
        return RunCuda(spec, /*graphs=*/true, true, requests);
      },
      {{"mtp", Spec(speculative::Algorithm::kMtp, 3)}, {"ddtree", Spec(speculative::Algorithm::kDdtree, 3, 8, 4)}},
      "CUDA ");
}

// The verify step itself on the golden fixtures, with batch-invariant kernels: every node of a
// branching tree gets bit for bit the logits of its path prefilled alone, across window
// wraps, compressor blocks (CSA and HCA entries completed inside the tree) and a KV block
// boundary; committing one root path leaves the slot as a plain run of that path does (the
// next token's logits agree bit for bit), whatever the other nodes held.
// Each fixture with bf16 KV and with --kv-cache-dtype fp8 (FP8 entries staged and committed
// as their bytes).
class CudaTreeVerifyTest : public ::testing::TestWithParam<std::tuple<std::filesystem::path, bool>> {
 protected:
  // 12 nodes, depth 6, branching at every level but the last (speculative_model_test's tree).
  const std::vector<int32_t> parents_ = {-1, 0, 0, 1, 1, 2, 3, 3, 6, 8, 9, 4};

  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    const auto dir = std::get<0>(GetParam()) / "model";
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = *config;
    auto checkpoint = Checkpoint::Open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
    testing::SlotModelOptions o;
    o.num_slots = 2;
    o.max_tokens = 1024;
    o.max_context = std::min<int64_t>(config->max_position_embeddings, 1024);
    max_context_ = o.max_context;
    o.max_logit_rows = 1024;
    o.block_tokens = 64;
    o.batch_invariant = true;
    o.max_verify_rows = 2 * static_cast<int64_t>(parents_.size());
    o.kv_cache_fp8 = std::get<1>(GetParam());
    auto model = testing::SlotModel::Create(*config, **checkpoint, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }

  std::vector<int32_t> PathTo(int32_t node) const {
    std::vector<int32_t> path;
    for (int32_t j = node; j >= 0; j = parents_[static_cast<size_t>(j)]) path.push_back(j);
    std::reverse(path.begin(), path.end());
    return path;
  }

  static std::vector<int32_t> Tokens(int64_t n, int64_t vocab, int32_t salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % vocab);
    return t;
  }

  // The last token's logits of `tokens` prefilled into `slot` from position 0 in one chunk.
  std::vector<float> RunAlone(int32_t slot, std::span<const int32_t> tokens) {
    std::vector<float> logits;
    const testing::StepChunk c{slot, 0, tokens, true, false};
    const Status s = model_->Forward({&c, 1}, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }

  // Verifies `tree` (its `parents`) after `prefix` in slot 0, keeps the root path `nodes`, then
  // decodes `next` one token at a time: each step's logits must be a plain run's, bit for bit.
  void ExpectPlainAfterCommit(const std::vector<int32_t>& prefix, const std::vector<int32_t>& tree,
                              const std::vector<int32_t>& parents, const std::vector<int32_t>& nodes,
                              const std::vector<int32_t>& next, const std::string& what) {
    ASSERT_FALSE(RunAlone(0, prefix).empty()) << what;
    std::vector<float> logits;
    const testing::StepChunk verify{0, static_cast<int64_t>(prefix.size()), tree, true, false, parents};
    ASSERT_TRUE(model_->Forward({&verify, 1}, &logits).ok()) << what;
    const TreeCommit commit{0, nodes};
    ASSERT_TRUE(model_->executor().CommitTrees({&commit, 1}).ok()) << what;
    std::vector<int32_t> seq = prefix;
    for (int32_t j : nodes) seq.push_back(tree[static_cast<size_t>(j)]);
    for (size_t k = 0; k < next.size(); ++k) {
      const testing::StepChunk step{0, static_cast<int64_t>(seq.size()), std::span(next).subspan(k, 1), true, false};
      ASSERT_TRUE(model_->Forward({&step, 1}, &logits).ok()) << what;
      seq.push_back(next[k]);
      const std::vector<float> alone = RunAlone(1, seq);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), logits.begin())) << what << ", token " << k;
    }
  }

  std::vector<int64_t> PrefixLengths() const {
    const int64_t w = config_.sliding_window;
    return {1, 5, w - 2, 64 - 3, std::max<int64_t>(1, config_.compress_ratio_hca - 4)};
  }

  ModelConfig config_;
  int64_t max_context_ = 0;
  std::unique_ptr<testing::SlotModel> model_;
};

TEST_P(CudaTreeVerifyTest, EveryNodeGetsTheLogitsOfItsPathRunAlone) {
  const int64_t vocab = config_.vocab_size;
  const auto v = static_cast<size_t>(vocab);
  for (int64_t prefix_len : PrefixLengths()) {
    if (prefix_len + 8 > max_context_) continue;
    const std::vector<int32_t> prefix = Tokens(prefix_len, vocab, 1);
    const std::vector<int32_t> tree = Tokens(static_cast<int64_t>(parents_.size()), vocab, 2);
    ASSERT_FALSE(RunAlone(0, prefix).empty());
    std::vector<float> logits;
    const testing::StepChunk verify{0, prefix_len, tree, true, false, parents_};
    ASSERT_TRUE(model_->Forward({&verify, 1}, &logits).ok());
    ASSERT_EQ(logits.size(), parents_.size() * v);
    // Keep the root alone (the next step would drop an uncommitted tree).
    const TreeCommit root{0, {0}};
    ASSERT_TRUE(model_->executor().CommitTrees({&root, 1}).ok());
    for (size_t node = 0; node < parents_.size(); ++node) {
      std::vector<int32_t> seq = prefix;
      for (int32_t j : PathTo(static_cast<int32_t>(node))) seq.push_back(tree[static_cast<size_t>(j)]);
      const std::vector<float> alone = RunAlone(1, seq);
      ASSERT_EQ(alone.size(), v);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), logits.begin() + static_cast<std::ptrdiff_t>(node * v)))
          << "prefix " << prefix_len << " node " << node;
    }
  }
}

TEST_P(CudaTreeVerifyTest, CommittingAPathLeavesThePlainRunsState) {
  const int64_t vocab = config_.vocab_size;
  const std::vector<int32_t> tree = Tokens(static_cast<int64_t>(parents_.size()), vocab, 4);
  // A chain kept whole, longer than a CSA ring (8 rows): only the last kept rows of each ring
  // row may land there.
  std::vector<int32_t> chain_parents(13), all_nodes(13);
  for (size_t i = 0; i < chain_parents.size(); ++i) {
    chain_parents[i] = static_cast<int32_t>(i) - 1;
    all_nodes[i] = static_cast<int32_t>(i);
  }
  const std::vector<int32_t> chain = Tokens(static_cast<int64_t>(chain_parents.size()), vocab, 9);
  for (int64_t prefix_len : PrefixLengths()) {
    if (prefix_len + 32 > max_context_) continue;
    for (int32_t leaf : {9, 5, 11})
      ExpectPlainAfterCommit(Tokens(prefix_len, vocab, 3), tree, parents_, PathTo(leaf), Tokens(2, vocab, 5 + leaf),
                             "prefix " + std::to_string(prefix_len) + ", path to " + std::to_string(leaf));
    ExpectPlainAfterCommit(Tokens(prefix_len, vocab, 8), chain, chain_parents, all_nodes, Tokens(4, vocab, 10),
                           "prefix " + std::to_string(prefix_len) + ", a 13-token chain");
  }
  // A list that is not a root path is refused, and so is a commit for a slot without a tree.
  const std::vector<int32_t> prefix = Tokens(4, vocab, 6), other = Tokens(static_cast<int64_t>(parents_.size()), vocab, 7);
  ASSERT_FALSE(RunAlone(0, prefix).empty());
  std::vector<float> logits;
  const testing::StepChunk verify{0, 4, other, true, false, parents_};
  ASSERT_TRUE(model_->Forward({&verify, 1}, &logits).ok());
  const TreeCommit skipping{0, {0, 3}}, other_slot{1, {0}}, root{0, {0}};
  EXPECT_EQ(model_->executor().CommitTrees({&skipping, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->executor().CommitTrees({&other_slot, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(model_->executor().CommitTrees({&root, 1}).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTreeVerifyTest,
                         ::testing::Combine(::testing::ValuesIn(testing::FixtureDirs()), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param).filename().string() +
                                  (std::get<1>(info.param) ? "_fp8_kv" : "");
                         });

}  // namespace
}  // namespace peregrine
