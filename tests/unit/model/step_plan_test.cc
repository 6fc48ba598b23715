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
                         /*max_stage_rows=*/6, /*max_tree_depth=*/4};

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

// A verify chain is a tree with one node per depth: every logits row, no ring update, a
// staging row per node, its own rows in its window; a plain chunk beside it is planned as
// usual (and its compressor runs sequentially, the chain's does not).
TEST(StepPlanTest, VerifyChainStagesItsRows) {
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
  EXPECT_EQ(p.tree_rows, (std::vector<int32_t>{-1, -1, 0, 1, 2, 3}));
  EXPECT_EQ(p.num_stage_rows, 4);
  EXPECT_EQ(p.compress_slots, (std::vector<int32_t>{2, -1}));
  ASSERT_EQ(p.verify_chunks.size(), 1u);
  EXPECT_EQ(p.verify_chunks[0].chunk, 1);
  EXPECT_EQ(p.verify_chunks[0].first_row, 2);
  EXPECT_EQ(p.verify_chunks[0].first_stage_row, 0);
  // Node 3 (position 12) reads 9..12: the scratch rows 14..17 of its path (rows 2..5).
  EXPECT_EQ(std::vector<int32_t>(p.window_indices.begin() + 5 * 4, p.window_indices.begin() + 6 * 4),
            (std::vector<int32_t>{14, 15, 16, 17}));
  ASSERT_EQ(p.path_capacity, 5);
  EXPECT_EQ(std::vector<int32_t>(p.tree_paths.begin() + 5 * 5, p.tree_paths.begin() + 6 * 5),
            (std::vector<int32_t>{2, 3, 4, 5, -1}));
  // CSA entry 2 (positions 8..11) is completed by the node at 11 (staging row 2): nodes at 11
  // and 12 read it from there; entries 0 and 1 are in the pool. Plain rows stage nothing.
  EXPECT_EQ(p.csa_entries, (std::vector<int32_t>{0, 0, 2, 2, 3, 3}));
  EXPECT_EQ(p.csa_staged_first, (std::vector<int32_t>{0, 0, 2, 2, 2, 2}));
  ASSERT_EQ(p.csa_staged_capacity, 2);
  EXPECT_EQ(p.csa_staged, (std::vector<int32_t>{-1, -1, -1, -1, -1, -1, -1, -1, 2, -1, 2, -1}));
  EXPECT_EQ(p.hca_staged_first, (std::vector<int32_t>{0, 0, 1, 1, 1, 1}));  // entry 0 only: committed
}

// Siblings share a position but never each other's rows: each node's window and staged
// entries follow its own path.
TEST(StepPlanTest, TreeNodesReadTheirOwnPaths) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> draft = {5, 6, 7, 8}, parents = {-1, 0, 0, 1};
  ChunkView tree = Chunk(1, 9, draft, true);
  tree.tree_parents = parents;
  auto plan = PlanStep({&tree, 1}, c, kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const StepPlan& p = *plan;
  EXPECT_EQ(p.positions, (std::vector<int32_t>{9, 10, 10, 11}));
  auto window = [&](int t) {
    return std::vector<int32_t>(p.window_indices.begin() + t * 4, p.window_indices.begin() + t * 4 + 4);
  };
  // Scratch rows start at 3 slots x 4 = 12; slot 1's ring holds position q at 4 + q % 4.
  EXPECT_EQ(window(2), (std::vector<int32_t>{7, 4, 12, 14}));   // positions 7, 8 (ring), 9, 10 (root, itself)
  EXPECT_EQ(window(3), (std::vector<int32_t>{4, 12, 13, 15}));  // 8 (ring), 9, 10 (node 1), 11 (itself)
  EXPECT_EQ(std::vector<int32_t>(p.tree_paths.begin() + 3 * 5, p.tree_paths.begin() + 4 * 5),
            (std::vector<int32_t>{0, 1, 3, -1, -1}));
  // Node 3 completes CSA entry 2 itself; node 2 sees entries 0 and 1 only.
  EXPECT_EQ(p.csa_entries, (std::vector<int32_t>{2, 2, 2, 3}));
  EXPECT_EQ(std::vector<int32_t>(p.csa_staged.begin() + 3 * 2, p.csa_staged.begin() + 4 * 2),
            (std::vector<int32_t>{3, -1}));
  EXPECT_EQ(std::vector<int32_t>(p.csa_staged.begin() + 2 * 2, p.csa_staged.begin() + 3 * 2),
            (std::vector<int32_t>{-1, -1}));
}

TEST(StepPlanTest, RefusesMalformedOrOversizedTrees) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> draft = {5, 6, 7, 8}, parents = {-1, 0, 1, 2};
  ChunkView chain = Chunk(1, 9, draft, true);
  chain.tree_parents = parents;
  auto refused = [&](const ChunkView& v) { return PlanStep({&v, 1}, c, kLimits).status().code() == StatusCode::kInvalidArgument; };
  ChunkView bad = chain;
  const std::vector<int32_t> later_parent = {-1, 2, 0, 1}, two_roots = {-1, -1, 0, 1}, short_list = {-1, 0};
  bad.tree_parents = later_parent;
  EXPECT_TRUE(refused(bad));
  bad.tree_parents = two_roots;
  EXPECT_TRUE(refused(bad));
  bad.tree_parents = short_list;
  EXPECT_TRUE(refused(bad));
  // Deeper than max_tree_depth (4): a chain of 6 nodes.
  const std::vector<int32_t> six = {5, 6, 7, 8, 9, 10}, six_parents = {-1, 0, 1, 2, 3, 4};
  ChunkView deep = Chunk(1, 9, six, true);
  deep.tree_parents = six_parents;
  EXPECT_TRUE(refused(deep));
  ChunkView restoring = chain;
  restoring.first_position = 8;
  restoring.restore = 0;
  EXPECT_TRUE(refused(restoring));
  ChunkView snapshotting = Chunk(1, 6, draft, true);  // passes boundary 8
  snapshotting.tree_parents = parents;
  const int32_t snap[] = {2};
  snapshotting.snapshots = snap;
  EXPECT_TRUE(refused(snapshotting));
  const int32_t no_snap[] = {-1};
  snapshotting.snapshots = no_snap;
  EXPECT_TRUE(PlanStep({&snapshotting, 1}, c, kLimits).ok());
  ChunkView other = chain;
  other.slot = 0;
  const ChunkView two_chains[] = {chain, other};  // 8 verify nodes, 6 staging rows
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
