// The block drafter (DSpark's layout, tests/fixtures/dspark_tiny) on the device: the target's
// taps, the stages following the committed rows in chunks of any size, the block with its
// Markov corrections, against the HF-transformers reference's blocks (as block_drafter_test
// on the CPU model, with bf16 tolerances); and the CUDA runner drafting chains and trees with
// it gives the tokens of no speculation. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "cuda_model_util.h"
#include "cuda_serve.h"
#include "dspark_golden.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"
#include "speculative_requests.h"

namespace peregrine {
namespace {

using deepseek_v4::drafter_test::DrafterGolden;
using deepseek_v4::drafter_test::FixtureDir;

// The device runs the target and the drafter in bf16 (the checkpoint is f32): a block position
// agrees with the reference when every candidate's log-probability is within this much of the
// reference's per unit of magnitude (twice cuda_parity_test's bound on the target's logits:
// the drafter runs on the target's rounded taps) and a greedy token that differs from the
// reference's is a near-tie there.
constexpr double kTolerance = 1e-1;
constexpr int32_t kCandidates = 8;

class CudaBlockDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    auto golden = deepseek_v4::drafter_test::ReadDrafterGolden();
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    golden_ = std::move(golden).value();
    auto config = LoadModelConfig(FixtureDir() / "model");
    auto checkpoint = Checkpoint::Open(FixtureDir() / "model");
    ASSERT_TRUE(config.ok() && checkpoint.ok());
    config_ = *config;
    checkpoint_ = std::move(checkpoint).value();
    ASSERT_EQ(config_.dspark_block_size, golden_.block);
    testing::SlotModelOptions o;
    o.num_slots = 2;
    o.max_tokens = 64;
    o.max_context = 256;
    o.max_logit_rows = 16;
    o.block_tokens = 64;
    o.max_verify_rows = 16;
    o.max_draft_steps = static_cast<int32_t>(golden_.block);
    o.draft_candidates = kCandidates;
    o.batch_invariant = true;
    auto model = testing::SlotModel::Create(config_, *checkpoint_, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    ASSERT_TRUE(model_->executor().has_drafter());
  }

  // Runs tokens [pos, pos + len) in `slot`; the drafter follows every row (paired with its
  // successor) and drafts a block after them when `draft`.
  std::vector<speculative::DepthCandidates> Step(int32_t slot, int64_t pos, int64_t len, bool draft) {
    const std::span<const int32_t> tokens(golden_.tokens);
    const testing::StepChunk chunk{slot, pos, tokens.subspan(static_cast<size_t>(pos), static_cast<size_t>(len)), true};
    std::vector<float> logits;
    const Status ran = model_->Forward({&chunk, 1}, &logits);
    EXPECT_TRUE(ran.ok()) << ran.ToString();
    std::vector<int32_t> rows(static_cast<size_t>(len));
    std::iota(rows.begin(), rows.end(), 0);
    DevicePairs in;
    in.slot = slot;
    in.first_position = pos;
    in.rows = rows;
    in.next = tokens.subspan(static_cast<size_t>(pos + 1), static_cast<size_t>(len));
    in.restart = pos == 0;
    in.draft = draft;
    std::vector<int32_t> drafted;
    std::vector<speculative::DepthCandidates> candidates;
    const Status s = model_->executor().Draft({&in, 1}, static_cast<int32_t>(golden_.block), &drafted, &candidates);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(drafted.size(), candidates.size());
    for (size_t i = 0; i < std::min(drafted.size(), candidates.size()); ++i)
      EXPECT_EQ(drafted[i], candidates[i].tokens.front()) << "the chain follows each depth's first candidate";
    return candidates;
  }

  // Anchor a's block against the reference, position by position until the first whose
  // greedy token differs from the reference's (later positions follow another token: their
  // Markov terms differ). A position agrees when every candidate's log-probability is within
  // the tolerance of the reference's and the greedy token is the reference's, or a near-tie
  // of it. Disagreements are printed.
  void CompareWithReference(size_t a, const std::vector<speculative::DepthCandidates>& got, const std::string& what,
                            int* positions, int* agreed) {
    ASSERT_EQ(got.size(), static_cast<size_t>(golden_.block)) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t row = a * static_cast<size_t>(golden_.block) + i;
      const float* ref = golden_.Logits(row);
      const double log_z = golden_.LogZ(row);
      ASSERT_EQ(got[i].tokens.size(), static_cast<size_t>(kCandidates)) << what << ", position " << i;
      double worst = 0.0;
      for (size_t k = 0; k < got[i].tokens.size(); ++k) {
        const double want = ref[got[i].tokens[k]] - log_z;
        worst = std::max(worst, std::fabs(got[i].logprobs[k] - want) / (1.0 + std::fabs(want)));
      }
      const int32_t mine = got[i].tokens.front(), theirs = golden_.block_tokens[row];
      const double gap = ref[theirs] - ref[mine];
      const bool agrees = worst <= kTolerance && gap <= kTolerance * (1.0 + std::fabs(ref[theirs]));
      ++*positions;
      *agreed += agrees ? 1 : 0;
      if (!agrees)
        std::printf("%s, position %zu: worst log-probability error %.4f (relative), greedy %d against the "
                    "reference's %d (logit gap %.4f)\n",
                    what.c_str(), i, worst, mine, theirs, gap);
      if (mine != theirs) break;
    }
  }

  DrafterGolden golden_;
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<testing::SlotModel> model_;
};

// With batch-invariant kernels the drafter's state and blocks cannot depend on how the
// committed rows came (one chunk per anchor, or one token per step): the two runs' blocks
// must be bit for bit the same. Against the reference, bf16 rounding moves learned routing
// (top-3 of 8 random experts, in the target and in the stages) at a few rows, and rows that
// switch experts differ by O(1) in log-probability; at least half the positions compared must
// agree (the first anchor's four come before any window wraps: a drafter that misread the
// rings would agree at those alone).
TEST_F(CudaBlockDrafterTest, BlocksFollowTheReferenceWhateverTheChunking) {
  int positions = 0, agreed = 0;
  std::vector<std::vector<speculative::DepthCandidates>> chunked;
  int64_t pos = 0;
  for (size_t a = 0; a < golden_.anchors.size(); ++a) {
    const int64_t anchor = golden_.anchors[a];
    chunked.push_back(Step(0, pos, anchor - pos, true));
    CompareWithReference(a, chunked.back(), "chunks, anchor " + std::to_string(anchor), &positions, &agreed);
    pos = anchor;
  }
  pos = 0;
  for (size_t a = 0; a < golden_.anchors.size(); ++a) {
    for (; pos + 1 < golden_.anchors[a]; ++pos) EXPECT_TRUE(Step(1, pos, 1, false).empty());
    const std::vector<speculative::DepthCandidates> single = Step(1, pos, 1, true);
    const std::string what = "single tokens, anchor " + std::to_string(golden_.anchors[a]);
    CompareWithReference(a, single, what, &positions, &agreed);
    ++pos;
    ASSERT_EQ(single.size(), chunked[a].size()) << what;
    for (size_t i = 0; i < single.size(); ++i) {
      EXPECT_EQ(single[i].tokens, chunked[a][i].tokens) << what << ", position " << i;
      EXPECT_EQ(single[i].logprobs, chunked[a][i].logprobs) << what << ", position " << i;
    }
  }
  std::printf("block positions that agree with the reference: %d of %d compared\n", agreed, positions);
  EXPECT_GE(2 * agreed, positions);
}

TEST_F(CudaBlockDrafterTest, RefusesMoreStepsThanABlock) {
  const int64_t anchor = golden_.anchors[0];
  ASSERT_FALSE(Step(0, 0, anchor, false).size());
  std::vector<int32_t> rows = {0}, next = {golden_.tokens[static_cast<size_t>(anchor + 1)]};
  const testing::StepChunk chunk{0, anchor, std::span<const int32_t>(golden_.tokens).subspan(static_cast<size_t>(anchor), 1),
                                 true};
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward({&chunk, 1}, &logits).ok());
  DevicePairs in;
  in.slot = 0;
  in.first_position = anchor;
  in.rows = rows;
  in.next = next;
  in.draft = true;
  std::vector<int32_t> drafted;
  EXPECT_EQ(model_->executor().Draft({&in, 1}, static_cast<int32_t>(golden_.block) + 1, &drafted, nullptr).code(),
            StatusCode::kInvalidArgument);
}

// The CUDA runner with the block drafter behind chains and trees, with batch-invariant kernels:
// every request's tokens and logprobs are those of no speculation (random drafter weights: few
// drafts are accepted, but every verify step runs its block).
TEST(CudaBlockDrafterEngineTest, ChainsAndTreesGiveTheNonSpeculativeTokens) {
  if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  const auto dir = FixtureDir() / "model";
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  std::vector<EngineRequest> requests = testing::SpeculativeRequests();
  for (EngineRequest& r : requests) {
    for (int32_t& t : r.prompt_ids) t %= static_cast<int32_t>(config->vocab_size);
    for (int32_t& t : r.stop_token_ids) t %= static_cast<int32_t>(config->vocab_size);
    r.max_tokens = 24;
  }
  testing::CudaServeOptions o;
  o.max_context = 256;
  o.block_tokens = 16;  // snapshot boundaries inside the generated text
  auto run = [&](const speculative::SpeculativeConfig& spec, bool graphs) {
    o.graphs = graphs;
    return testing::ServeOnCuda(dir, spec, o, requests);
  };
  const testing::EngineOutcome plain = run({}, true);
  speculative::SpeculativeConfig chain;
  chain.algorithm = speculative::Algorithm::kMtp;
  chain.num_steps = static_cast<int32_t>(config->dspark_block_size);
  speculative::SpeculativeConfig tree = chain;
  tree.algorithm = speculative::Algorithm::kDdtree;
  tree.num_draft_tokens = 8;
  tree.topk = 2;
  for (const auto& [spec, graphs] : {std::pair{chain, true}, std::pair{chain, false}, std::pair{tree, true}}) {
    std::string what = "block drafter, ";
    what += speculative::AlgorithmName(spec.algorithm);
    what += graphs ? ", graphs" : ", eager";
    const testing::EngineOutcome got = run(spec, graphs);
    testing::ExpectIdenticalOutcomes(got, plain, what);
    EXPECT_GT(got.stats.spec_num_drafts, 0) << what;
    std::printf("%s: %lld drafts, %lld draft tokens, %lld accepted (random drafter weights)\n", what.c_str(),
                static_cast<long long>(got.stats.spec_num_drafts), static_cast<long long>(got.stats.spec_num_draft_tokens),
                static_cast<long long>(got.stats.spec_num_accepted_tokens));
  }
}

}  // namespace
}  // namespace peregrine
