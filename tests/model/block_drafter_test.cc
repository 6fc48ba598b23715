// The block drafter in DSpark's layout on the CPU model, against the HF-transformers reference
// of tools/make_dspark_fixture.py (tests/fixtures/dspark_tiny): the drafter following the
// committed rows in chunks of any size, then drafting a block, gives the reference's tokens,
// logprobs and confidences; drafting leaves no trace in the drafter's state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "drafter_feed.h"
#include "dspark_golden.h"
#include "golden.h"
#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4 {
namespace {

using drafter_test::DrafterGolden;
using drafter_test::FixtureDir;
using drafter_test::ReadDrafterGolden;

class BlockDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto golden = ReadDrafterGolden();
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    golden_ = std::move(golden).value();
    auto model = Model::Load(FixtureDir() / "model", /*num_threads=*/2);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    ASSERT_TRUE(model_->has_block_drafter());
    ASSERT_TRUE(model_->has_drafter());
    ASSERT_EQ(model_->config().dspark_block_size, golden_.block);
    ASSERT_EQ(model_->config().vocab_size, golden_.vocab);
    const KvGeometry g = model_->Geometry(1);
    blocks_.resize(static_cast<size_t>(g.Layout().BlocksFor(256)));
    std::iota(blocks_.begin(), blocks_.end(), 0);
    pools_ = model_->CreateKvPools(g.block_tokens, 2, static_cast<int32_t>(blocks_.size()), 0);
  }

  // Runs tokens [pos, pos + len) in `slot` with the drafter following; drafts a block when
  // `draft` (the anchor is tokens[pos + len]).
  std::vector<speculative::DepthCandidates> Step(int32_t slot, int64_t pos, int64_t len, bool draft) {
    drafter_test::DrafterFeed feed;
    const Status fed = drafter_test::FeedDrafter(*model_, *pools_, blocks_, slot, golden_.tokens, pos, len, draft, &feed);
    EXPECT_TRUE(fed.ok()) << fed.ToString();
    DraftInput& in = feed.input;
    in.num_steps = draft ? static_cast<int32_t>(golden_.block) : 0;
    in.top_k = 3;
    std::vector<std::vector<speculative::DepthCandidates>> out;
    const Status s = model_->Draft(*pools_, std::vector<DraftInput>{in}, &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? std::vector<speculative::DepthCandidates>{} : out[0];
  }

  void ExpectReference(size_t a, const std::vector<speculative::DepthCandidates>& got, const std::string& what) {
    ASSERT_EQ(got.size(), static_cast<size_t>(golden_.block)) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t row = a * static_cast<size_t>(golden_.block) + i;
      const float* ref = golden_.Logits(row);
      const double log_z = golden_.LogZ(row);
      EXPECT_EQ(got[i].tokens.front(), golden_.block_tokens[row]) << what << ", position " << i;
      for (size_t k = 0; k < got[i].tokens.size(); ++k)
        EXPECT_NEAR(got[i].logprobs[k], ref[got[i].tokens[k]] - log_z, 2e-4) << what << ", position " << i;
      EXPECT_NEAR(got[i].confidence, golden_.confidence[row], 1e-5) << what << ", position " << i;
    }
  }

  DrafterGolden golden_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> blocks_;
  std::unique_ptr<HostKvPools> pools_;
};

TEST_F(BlockDrafterTest, BlocksMatchTheReferenceWhateverTheChunking) {
  // Chunks that end at the anchors, then one token at a time in the other slot.
  int64_t pos = 0;
  for (size_t a = 0; a < golden_.anchors.size(); ++a) {
    const int64_t anchor = golden_.anchors[a];
    ExpectReference(a, Step(0, pos, anchor - pos, true), "chunks, anchor " + std::to_string(anchor));
    pos = anchor;
  }
  pos = 0;
  for (size_t a = 0; a < golden_.anchors.size(); ++a) {
    for (; pos + 1 < golden_.anchors[a]; ++pos) EXPECT_TRUE(Step(1, pos, 1, false).empty());
    ExpectReference(a, Step(1, pos, 1, true), "single tokens, anchor " + std::to_string(golden_.anchors[a]));
    ++pos;
  }
}

TEST_F(BlockDrafterTest, ShortDraftsArePrefixesAndBadInputsAreRefused) {
  const int64_t anchor = golden_.anchors[1];
  ASSERT_TRUE(Step(0, 0, anchor, false).empty());
  std::vector<int32_t> rows;
  DraftInput in;
  in.slot = 0;
  in.first_position = anchor;
  in.rows = rows;
  in.tokens = std::span<const int32_t>(golden_.tokens.data() + anchor, 1);
  in.num_steps = 2;
  in.top_k = 1;
  std::vector<std::vector<speculative::DepthCandidates>> out;
  ASSERT_TRUE(model_->Draft(*pools_, std::vector<DraftInput>{in}, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(out[0][i].tokens.front(), golden_.block_tokens[static_cast<size_t>(golden_.block) + i]);
  in.num_steps = 50;  // more than a block: one block's worth
  out.clear();
  ASSERT_TRUE(model_->Draft(*pools_, std::vector<DraftInput>{in}, &out).ok());
  ExpectReference(1, out[0], "after a short draft");

  const std::vector<int32_t> bad_token = {static_cast<int32_t>(golden_.vocab)};
  in.tokens = bad_token;
  EXPECT_EQ(model_->Draft(*pools_, std::vector<DraftInput>{in}, &out).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> far_row = {4096};
  in.tokens = std::span<const int32_t>(golden_.tokens.data(), 2);
  in.rows = far_row;
  EXPECT_EQ(model_->Draft(*pools_, std::vector<DraftInput>{in}, &out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::deepseek_v4
