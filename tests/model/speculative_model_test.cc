// Speculative decoding on the CPU model: a draft tree's verify forward gives every node the
// logits of its path run alone, CommitTree leaves the state a plain run of the kept path
// leaves (snapshots included), and the MTP drafter's first step equals the stateless MTP
// reference whatever the chunking.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "demo_model_golden.h"
#include "drafter_feed.h"
#include "golden.h"
#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4 {
namespace {

using testing::FixtureDirs;

// A tree of 12 nodes and depth 6 with branching at every level but the last.
const std::vector<int32_t> kParents = {-1, 0, 0, 1, 1, 2, 3, 3, 6, 8, 9, 4};

std::vector<int32_t> PathTo(int32_t node) {
  std::vector<int32_t> path;
  for (int32_t j = node; j >= 0; j = kParents[static_cast<size_t>(j)]) path.push_back(j);
  std::reverse(path.begin(), path.end());
  return path;
}

// Deterministic ids in [0, vocab).
std::vector<int32_t> Tokens(int64_t n, int64_t vocab, int32_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % vocab);
  return t;
}

class TreeVerifyTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  void SetUp() override {
    auto model = Model::Load(GetParam() / "model", /*num_threads=*/2);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    geometry_ = model_->Geometry(1);
    const int64_t b = geometry_.block_tokens;
    blocks_.resize(static_cast<size_t>(geometry_.Layout().BlocksFor(3 * b + 4 * geometry_.window + 64)));
    std::iota(blocks_.begin(), blocks_.end(), 0);
    pools_ = model_->CreateKvPools(b, /*num_slots=*/2, static_cast<int32_t>(blocks_.size()), /*num_snapshots=*/4);
    kv_ = dynamic_cast<CpuKvStore*>(pools_.get());
    ASSERT_NE(kv_, nullptr);
  }

  ChunkView View(int32_t slot, int64_t first, std::span<const int32_t> tokens) const {
    ChunkView v;
    v.slot = slot;
    v.first_position = first;
    v.num_tokens = static_cast<int64_t>(tokens.size());
    v.tokens = tokens;
    v.blocks = blocks_;
    v.needs_logits = true;
    return v;
  }

  // The last token's logits after a plain run of `tokens` from position 0 on a fresh state.
  std::vector<float> RunAlone(std::span<const int32_t> tokens) {
    SequenceState state = model_->NewSequence();
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(state, tokens, /*all_logits=*/false, &logits).ok());
    return logits;
  }

  std::unique_ptr<Model> model_;
  KvGeometry geometry_;
  std::vector<int32_t> blocks_;
  std::unique_ptr<HostKvPools> pools_;
  CpuKvStore* kv_ = nullptr;
};

// Prefixes that put the tree across window wraps, compressor blocks and a KV block boundary.
std::vector<int64_t> PrefixLengths(const KvGeometry& g) {
  return {1, 5, g.window - 2, g.block_tokens - 3};
}

TEST_P(TreeVerifyTest, EveryNodeGetsTheLogitsOfItsPathRunAlone) {
  const int64_t vocab = model_->config().vocab_size;
  const auto v = static_cast<size_t>(vocab);
  for (int64_t prefix_len : PrefixLengths(geometry_)) {
    const std::vector<int32_t> prefix = Tokens(prefix_len, vocab, 1);
    const std::vector<int32_t> tree = Tokens(static_cast<int64_t>(kParents.size()), vocab, 2);
    std::vector<float> logits;
    ASSERT_TRUE(model_->Forward(std::vector<ChunkView>{View(0, 0, prefix)}, *kv_, &logits).ok());
    ChunkView verify = View(0, prefix_len, tree);
    verify.tree_parents = kParents;
    ASSERT_TRUE(model_->Forward(std::vector<ChunkView>{verify}, *kv_, &logits).ok());
    ASSERT_EQ(logits.size(), kParents.size() * v);
    for (size_t node = 0; node < kParents.size(); ++node) {
      std::vector<int32_t> seq = prefix;
      for (int32_t j : PathTo(static_cast<int32_t>(node))) seq.push_back(tree[static_cast<size_t>(j)]);
      const std::vector<float> alone = RunAlone(seq);
      // Each node's row is computed as a plain run computes its token: bit-identical.
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), logits.begin() + static_cast<std::ptrdiff_t>(node * v)))
          << "prefix " << prefix_len << " node " << node;
    }
  }
}

TEST_P(TreeVerifyTest, CommittingAPathLeavesThePlainRunsState) {
  const int64_t vocab = model_->config().vocab_size;
  const int64_t b = geometry_.block_tokens;
  // The kept path 0-1-3-6-8 crosses the block boundary at b (snapshot 3 taken there).
  const int64_t prefix_len = b - 3;
  const std::vector<int32_t> prefix = Tokens(prefix_len, vocab, 3);
  const std::vector<int32_t> tree = Tokens(static_cast<int64_t>(kParents.size()), vocab, 4);
  const std::vector<int32_t> path = PathTo(8);
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(std::vector<ChunkView>{View(0, 0, prefix)}, *kv_, &logits).ok());
  ChunkView verify = View(0, prefix_len, tree);
  verify.tree_parents = kParents;
  const std::vector<int32_t> snapshots = {3};
  verify.snapshots = snapshots;
  ASSERT_TRUE(model_->Forward(std::vector<ChunkView>{verify}, *kv_, &logits).ok());
  ASSERT_TRUE(model_->CommitTree(*kv_, 0, blocks_, path).ok());
  EXPECT_FALSE(model_->CommitTree(*kv_, 0, blocks_, path).ok()) << "a tree is kept once";

  std::vector<int32_t> seq = prefix;
  for (int32_t j : path) seq.push_back(tree[static_cast<size_t>(j)]);
  const std::vector<int32_t> more = Tokens(2 * geometry_.window + 9, vocab, 5);
  // Continue in slot 0 token by token, and in slot 1 from the snapshot at b.
  std::vector<int32_t> from_boundary(seq.begin() + b, seq.end());
  ASSERT_TRUE(model_->Forward(std::vector<ChunkView>{[&] {
                                ChunkView r = View(1, b, from_boundary);
                                r.restore = 3;
                                return r;
                              }()},
                              *kv_, &logits)
                  .ok());
  int64_t pos = static_cast<int64_t>(seq.size());
  for (int32_t t : more) {
    const std::vector<int32_t> one = {t};
    std::vector<float> a, c;
    const Status sa = model_->Forward(std::vector<ChunkView>{View(0, pos, one)}, *kv_, &a);
    ASSERT_TRUE(sa.ok()) << sa.ToString();
    const Status sc = model_->Forward(std::vector<ChunkView>{View(1, pos, one)}, *kv_, &c);
    ASSERT_TRUE(sc.ok()) << sc.ToString();
    seq.push_back(t);
    ++pos;
    const std::vector<float> alone = RunAlone(seq);
    EXPECT_EQ(a, alone) << "after commit, position " << pos - 1;
    EXPECT_EQ(c, alone) << "from the committed snapshot, position " << pos - 1;
  }
}

TEST_P(TreeVerifyTest, MalformedTreesAreRefused) {
  const std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<float> logits;
  for (const std::vector<int32_t>& parents :
       std::vector<std::vector<int32_t>>{{0, 0, 1}, {-1, 2, 0}, {-1, 0}, {-1, -1, 0}}) {
    ChunkView v = View(0, 4, tokens);
    v.tree_parents = parents;
    EXPECT_EQ(model_->Forward(std::vector<ChunkView>{v}, *kv_, &logits).code(), StatusCode::kInvalidArgument);
  }
  const std::vector<int32_t> bad_path = {0, 2};
  ChunkView v = View(0, 0, tokens);
  const std::vector<int32_t> chain = {-1, 0, 1};
  v.tree_parents = chain;
  ASSERT_TRUE(model_->Forward(std::vector<ChunkView>{v}, *kv_, &logits).ok());
  EXPECT_EQ(model_->CommitTree(*kv_, 0, blocks_, bad_path).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TreeVerifyTest, ::testing::ValuesIn(FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

// The MTP drafter on the trained demo model.
class DrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load(testing::DemoModelDir(), /*num_threads=*/2);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    ASSERT_TRUE(model_->has_drafter());
    const KvGeometry g = model_->Geometry(1);
    blocks_.resize(static_cast<size_t>(g.Layout().BlocksFor(1024)));
    std::iota(blocks_.begin(), blocks_.end(), 0);
    pools_ = model_->CreateKvPools(g.block_tokens, 2, static_cast<int32_t>(blocks_.size()), 0);
  }

  std::unique_ptr<Model> model_;
  std::vector<int32_t> blocks_;
  std::unique_ptr<HostKvPools> pools_;
};

TEST_F(DrafterTest, FirstStepEqualsTheMtpReferenceWhateverTheChunking) {
  auto golden = testing::ReadDemoGolden();
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const std::vector<int32_t>& tokens = golden->mtp_tokens;
  ASSERT_GT(tokens.size(), 40u);
  const auto n = static_cast<int64_t>(tokens.size());
  std::vector<float> reference;
  ASSERT_TRUE(model_->MtpLogits(tokens, &reference).ok());
  const auto v = static_cast<size_t>(model_->config().vocab_size);

  // Chunks of 7 with the drafter following (the last row of each waits for its successor),
  // then every 5th position a 3-step chain whose writes must not disturb what follows.
  int64_t pos = 0;
  int checked = 0;
  while (pos + 1 < n) {
    const int64_t len = std::min<int64_t>(7, n - 1 - pos);
    const bool draft = (pos / 7) % 2 == 1;
    // Drafting needs the successor of the chunk's last row: the next token (FeedDrafter adds it).
    drafter_test::DrafterFeed feed;
    ASSERT_TRUE(drafter_test::FeedDrafter(*model_, *pools_, blocks_, 1, tokens, pos, len, draft, &feed).ok());
    DraftInput& in = feed.input;
    in.num_steps = draft ? 3 : 0;
    in.top_k = 4;
    std::vector<std::vector<speculative::DepthCandidates>> out;
    ASSERT_TRUE(model_->Draft(*pools_, std::vector<DraftInput>{in}, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    if (draft) {
      ASSERT_EQ(out[0].size(), 3u);
      // Step 1 after token pos + len: the reference's row pos + len - 1.
      const float* row = reference.data() + static_cast<size_t>(pos + len - 1) * v;
      const auto best = std::max_element(row, row + v) - row;
      EXPECT_EQ(out[0][0].tokens.front(), best) << "position " << pos + len - 1;
      double sum = 0.0;
      for (size_t k = 0; k < v; ++k) sum += std::exp(static_cast<double>(row[k]) - row[best]);
      EXPECT_NEAR(out[0][0].logprobs.front(), -std::log(sum), 1e-5);
      for (size_t k = 1; k < out[0][0].tokens.size(); ++k) {
        EXPECT_GE(row[out[0][0].tokens[k - 1]], row[out[0][0].tokens[k]]);
        EXPECT_LE(out[0][0].logprobs[k], out[0][0].logprobs[k - 1]);
      }
      ++checked;
    }
    pos += len;
  }
  EXPECT_GT(checked, 2);
}

}  // namespace
}  // namespace peregrine::deepseek_v4
