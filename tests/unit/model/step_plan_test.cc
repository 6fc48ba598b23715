// The host plan of a device step: window lists, ring updates, visible entries, logit rows,
// block coverage and snapshot tables.
#include "model/deepseek_v4/step_plan.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace peregrine::deepseek_v4 {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.sliding_window = 4;
  c.compress_ratio_csa = 4;
  c.compress_ratio_hca = 8;
  c.index_topk = 2;
  return c;
}

// 8-token blocks, taken once 4 tokens of the block exist.
const StepLimits kLimits{/*num_slots=*/3, /*max_tokens=*/16, /*max_context=*/64, /*block_tokens=*/8,
                         /*num_blocks=*/32, /*num_snapshots=*/4, /*first_entry_tokens=*/4,
                         /*max_save_rows=*/6};

const std::vector<int32_t> kBlocks = [] {
  std::vector<int32_t> b(8);
  std::iota(b.begin(), b.end(), 10);
  return b;
}();

ChunkView Chunk(int32_t slot, int64_t first, std::span<const int32_t> tokens, bool logits, bool all = false) {
  ChunkView v;
  v.slot = slot;
  v.first_position = first;
  v.num_tokens = static_cast<int64_t>(tokens.size());
  v.tokens = tokens;
  v.blocks = kBlocks;
  v.needs_logits = logits;
  v.all_logits = all;
  return v;
}

TEST(StepPlanTest, PrefillChunkReadsRingThenItsOwnRows) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10};
  // Slot 2 continues at position 3: positions 3..8, scratch rows start at 3 * 4 = 12.
  const ChunkView chunk = Chunk(2, 3, tokens, true);
  auto plan = PlanStep({&chunk, 1}, c, kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const StepPlan& p = *plan;
  EXPECT_EQ(p.num_tokens, 6);
  EXPECT_EQ(p.positions, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(p.token_slots, (std::vector<int32_t>{2, 2, 2, 2, 2, 2}));
  // Token at position 3 sees positions 0..3: 0..2 from slot 2's ring (rows 8..10), 3 from scratch row 12.
  EXPECT_EQ(std::vector<int32_t>(p.window_indices.begin(), p.window_indices.begin() + 4),
            (std::vector<int32_t>{8, 9, 10, 12}));
  EXPECT_EQ(p.window_lengths[0], 4);
  // Token at position 8 sees 5..8, all this step's rows (scratch 14..17).
  EXPECT_EQ(std::vector<int32_t>(p.window_indices.begin() + 20, p.window_indices.begin() + 24),
            (std::vector<int32_t>{14, 15, 16, 17}));
  // Only the last W = 4 tokens (positions 5..8) go to the ring, at 8 + pos % 4.
  EXPECT_EQ(p.ring_src, (std::vector<int32_t>{-1, -1, 14, 15, 16, 17}));
  EXPECT_EQ(p.ring_dst, (std::vector<int32_t>{-1, -1, 9, 10, 11, 8}));
  EXPECT_EQ(p.csa_entries, (std::vector<int32_t>{1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(p.hca_entries, (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(p.csa_rows[5], 4 + 2);
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{5}));
  EXPECT_EQ(p.chunk_offsets, (std::vector<int32_t>{0, 6}));
}

TEST(StepPlanTest, DecodeBatchAndLogitRows) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> a = {1}, b = {2, 3};
  const ChunkView chunks[] = {Chunk(0, 0, a, true), Chunk(1, 10, b, false, true)};
  auto plan = PlanStep(chunks, c, kLimits);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->window_lengths, (std::vector<int32_t>{1, 4, 4}));
  EXPECT_EQ(plan->window_indices[0], 12);  // position 0: its own scratch row only
  EXPECT_EQ(plan->logit_rows, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(plan->chunk_slots, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(plan->chunk_positions, (std::vector<int32_t>{0, 10}));
  EXPECT_EQ(plan->max_csa_entries, 3);
}

TEST(StepPlanTest, FedTokensAreZeroUntilTheDeviceFillsThem) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> known = {4, 5};
  ChunkView v = Chunk(1, 6, known, true);
  v.num_tokens = 3;
  v.feeds_last = true;
  auto plan = PlanStep({&v, 1}, c, kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->token_ids, (std::vector<int32_t>{4, 5, 0}));
  EXPECT_EQ(plan->positions, (std::vector<int32_t>{6, 7, 8}));
}

TEST(StepPlanTest, SnapshotTableHasOneColumnPerBoundaryAChunkCanPass) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> t(13, 3), one = {7};
  ChunkView a = Chunk(0, 2, t, true);  // positions 2..14: boundary 8 only
  const int32_t snaps_a[] = {3};
  a.snapshots = snaps_a;
  ChunkView b = Chunk(1, 15, one, true);  // position 15: ends on boundary 16
  const int32_t snaps_b[] = {1};
  b.snapshots = snaps_b;
  const ChunkView chunks[] = {a, b};
  auto plan = PlanStep(chunks, c, kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->max_snapshots, 13 / 8 + 1);
  EXPECT_EQ(plan->snapshot_table, (std::vector<int32_t>{3, -1, 1, -1}));
  // Decode steps need one column.
  EXPECT_EQ(MaxSnapshotsPerChunk(1, 256), 1);
}

// A verify chain runs as consecutive tokens with every logits row, leaves the rings alone and
// saves its tokens' compressor rows; a plain chunk beside it is planned as usual.
TEST(StepPlanTest, VerifyChainStagesItsRowsAndSavesCompressorRows) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> draft = {5, 6, 7, 8}, parents = {-1, 0, 1, 2}, prompt = {1, 2};
  ChunkView chain = Chunk(1, 9, draft, true);
  chain.tree_parents = parents;
  const ChunkView plain = Chunk(2, 0, prompt, true);
  const ChunkView chunks[] = {plain, chain};
  auto plan = PlanStep(chunks, c, kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const StepPlan& p = *plan;
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 9, 10, 11, 12}));
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  // The prompt's rows move into slot 2's ring (rows 8 + pos % 4); the chain's stay staged.
  EXPECT_EQ(p.ring_src, (std::vector<int32_t>{12, 13, -1, -1, -1, -1}));
  EXPECT_EQ(p.ring_dst, (std::vector<int32_t>{8, 9, -1, -1, -1, -1}));
  EXPECT_EQ(p.save_rows, (std::vector<int32_t>{-1, -1, 0, 1, 2, 3}));
  EXPECT_EQ(p.num_save_rows, 4);
  ASSERT_EQ(p.verify_chunks.size(), 1u);
  EXPECT_EQ(p.verify_chunks[0].chunk, 1);
  EXPECT_EQ(p.verify_chunks[0].first_row, 2);
  EXPECT_EQ(p.verify_chunks[0].first_save_row, 0);
  // Node 3 (position 12) reads 9..12: ring rows of slot 1 for none, scratch rows 14..17 for all.
  EXPECT_EQ(std::vector<int32_t>(p.window_indices.begin() + 5 * 4, p.window_indices.begin() + 6 * 4),
            (std::vector<int32_t>{14, 15, 16, 17}));

  // Trees, restores, snapshots and too many verify tokens are refused.
  const std::vector<int32_t> tree = {-1, 0, 0, 1};
  ChunkView branching = chain;
  branching.tree_parents = tree;
  EXPECT_EQ(PlanStep({&branching, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  ChunkView snapshotting = Chunk(1, 6, draft, true);  // passes boundary 8
  snapshotting.tree_parents = parents;
  const int32_t snap[] = {2};
  snapshotting.snapshots = snap;
  EXPECT_EQ(PlanStep({&snapshotting, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const int32_t no_snap[] = {-1};
  snapshotting.snapshots = no_snap;
  EXPECT_TRUE(PlanStep({&snapshotting, 1}, c, kLimits).ok());
  ChunkView other = chain;
  other.slot = 0;
  const ChunkView two_chains[] = {chain, other};  // 8 verify tokens, 6 save rows
  EXPECT_EQ(PlanStep(two_chains, c, kLimits).status().code(), StatusCode::kInvalidArgument);
}

TEST(StepPlanTest, RejectsBadSteps) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> t = {1}, none;
  const ChunkView twice[] = {Chunk(1, 0, t, true), Chunk(1, 5, t, true)};
  EXPECT_EQ(PlanStep(twice, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const ChunkView out_of_range = Chunk(3, 0, t, true);
  EXPECT_EQ(PlanStep({&out_of_range, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const ChunkView empty = Chunk(0, 0, none, true);
  EXPECT_EQ(PlanStep({&empty, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const ChunkView too_long = Chunk(0, 64, t, true);
  EXPECT_EQ(PlanStep({&too_long, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> many(17, 1);
  const ChunkView too_many = Chunk(0, 0, many, true);
  EXPECT_EQ(PlanStep({&too_many, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  // Position 20 is in block 2 (which has entries from 20): a table of two blocks misses it.
  ChunkView short_table = Chunk(0, 20, t, true);
  short_table.blocks = std::span(kBlocks).first(2);
  EXPECT_EQ(PlanStep({&short_table, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad_ids = {1, 99, 2};
  ChunkView bad_block = Chunk(0, 20, t, true);
  bad_block.blocks = bad_ids;
  EXPECT_EQ(PlanStep({&bad_block, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  ChunkView restore_off_boundary = Chunk(0, 5, t, true);
  restore_off_boundary.restore = 0;
  EXPECT_EQ(PlanStep({&restore_off_boundary, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const int32_t two[] = {0, 1};
  ChunkView extra_snapshot = Chunk(0, 7, t, true);  // reaches boundary 8 only
  extra_snapshot.snapshots = two;
  EXPECT_EQ(PlanStep({&extra_snapshot, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::deepseek_v4
