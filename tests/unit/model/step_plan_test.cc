// The host plan of a device step: window lists, ring updates, visible entries, logit rows.
#include "model/deepseek_v4/step_plan.h"

#include <gtest/gtest.h>

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

const StepLimits kLimits{/*num_slots=*/3, /*max_tokens=*/16, /*max_context=*/64};

TEST(StepPlanTest, PrefillChunkReadsRingThenItsOwnRows) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10};
  // Slot 2 continues at position 3: positions 3..8, scratch rows start at 3 * 4 = 12.
  const StepChunk chunk{2, 3, tokens, true, false};
  auto plan = PlanStep({&chunk, 1}, c, kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const StepPlan& p = *plan;
  EXPECT_EQ(p.num_tokens, 6);
  EXPECT_EQ(p.positions, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
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
  const StepChunk chunks[] = {{0, 0, a, true, false}, {1, 10, b, false, true}};
  auto plan = PlanStep(chunks, c, kLimits);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->window_lengths, (std::vector<int32_t>{1, 4, 4}));
  EXPECT_EQ(plan->window_indices[0], 12);  // position 0: its own scratch row only
  EXPECT_EQ(plan->logit_rows, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(plan->chunk_slots, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(plan->chunk_positions, (std::vector<int32_t>{0, 10}));
  EXPECT_EQ(plan->max_csa_entries, 3);
}

TEST(StepPlanTest, RejectsBadSteps) {
  const ModelConfig c = SmallConfig();
  const std::vector<int32_t> t = {1}, none;
  const StepChunk twice[] = {{1, 0, t, true, false}, {1, 5, t, true, false}};
  EXPECT_EQ(PlanStep(twice, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const StepChunk out_of_range{3, 0, t, true, false};
  EXPECT_EQ(PlanStep({&out_of_range, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const StepChunk empty{0, 0, none, true, false};
  EXPECT_EQ(PlanStep({&empty, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const StepChunk too_long{0, 64, t, true, false};
  EXPECT_EQ(PlanStep({&too_long, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> many(17, 1);
  const StepChunk too_many{0, 0, many, true, false};
  EXPECT_EQ(PlanStep({&too_many, 1}, c, kLimits).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::deepseek_v4
