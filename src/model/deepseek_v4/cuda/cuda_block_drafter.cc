// DSpark's block drafter on the device (CudaModel::PlanDraft / EnqueueDraft when the model
// loaded one): the same computation as the CPU model's BlockDraft (../speculative.cc), run
// right after a target step on that step's taps (its rows' lane means at the target layers,
// which the target step writes into `taps`).
//
// A call first runs the stages over every input's committed pairs: pair j is row rows[j] of
// the last step (or the slot's pending row), its input main_norm(main_proj(taps)) on every
// stream; each stage's window ring advances over them (the pairs' next tokens are not read:
// the stages route by learned gates). Then, for the drafting inputs, one step over a block per
// slot: the token after the last pair and `depth - 1` noise tokens at the positions after it,
// through the stages, the last stage's head mixer and norm and the head. Those block rows
// write ring rows of positions that are not committed: they are copied aside first and put
// back at the end. Last, depth by depth (each needs the token drafted before it), the Markov
// term markov_w2 . markov_w1[token before] is added to the depth's logits inside the
// candidates pass, whose greedy token is the next depth's "before".
//
// Positions are relative to where a slot's drafter (re)started (mtp_floor), as for the MTP
// drafter. The confidence head of the CPU drafter is not run: nothing reads it.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/copy_rows.h"
#include "backend/cuda/ops/embedding.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/rms_norm.h"
#include "backend/cuda/ops/sampling.h"
#include "model/deepseek_v4/cuda/cuda_model_impl.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4::cuda {

Status CudaModel::Impl::AllocateBlockDrafter() {
  const ModelConfig& c = config;
  const int64_t n = limits.max_tokens, d = c.hidden_size, hd = c.head_dim, slots = pools.num_slots;
  const int64_t width = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * d;
  const int64_t rank = c.dspark_markov_rank, block_size = c.dspark_block_size;
  if (rank % 8 != 0) return InvalidArgument("the block drafter on the device needs dspark_markov_rank a multiple of 8");
  if (width % 8 != 0) return InvalidArgument("the block drafter on the device needs hidden_size a multiple of 8");
  // A block step runs every drafting slot's block as rows of one step, all with logits.
  const int64_t depth = std::min<int64_t>(limits.max_draft_steps, block_size);
  if (slots * depth > std::min(n, limits.max_logit_rows))
    return InvalidArgument("the block drafter drafts " + std::to_string(slots * depth) +
                           " rows per call (slots x block): the model takes " + std::to_string(n) +
                           " tokens and " + std::to_string(limits.max_logit_rows) + " logits rows per step");
  auto alloc = [&](DType dtype, Shape shape, DeviceTensor* out) { return AllocateTensor(dtype, shape, out); };
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, width}, &taps));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, width}, &block_in));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {slots, width}, &block_pending));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, d}, &block_x));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {slots, rank}, &block_r));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {slots, c.vocab_size}, &block_markov));
  const auto stages = static_cast<int64_t>(block->stages.size());
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {stages, slots * block_size, hd}, &block_ring_save));
  return Status::Ok();
}

int64_t CudaModel::Impl::block_list_ints() const {
  const int64_t n = limits.max_tokens, slots = pools.num_slots, rows = slots * config.dspark_block_size;
  // gather_step, gather_pending, keep_pending, spread and ring (two lists each), logit_rows,
  // before and iota.
  return 2 * (2 * n + slots + n * config.hc_mult + rows) + rows + 2 * slots + 64;
}

Result<DeviceModel::DraftShape> CudaModel::Impl::PlanBlockDraft(std::span<const DevicePairs> inputs,
                                                                int32_t num_steps, StepMeta& meta) {
  const ModelConfig& c = config;
  if (num_steps < 1 || num_steps > limits.max_draft_steps || num_steps > c.dspark_block_size)
    return InvalidArgument("draft steps must be in [1, " +
                           std::to_string(std::min<int64_t>(limits.max_draft_steps, c.dspark_block_size)) +
                           "] (the block drafter drafts at most one block)");
  PG_ASSIGN_OR_RETURN(DraftPairs pairs, GatherDraftPairs(inputs, num_steps));
  const int64_t slots = pools.num_slots;
  const int64_t depth = num_steps;
  const ModelConfig dc = BlockDrafterConfig(c);
  StepLimits lim;
  lim.num_slots = slots;
  lim.max_tokens = limits.max_tokens;
  lim.max_context = limits.max_context;
  BlockPlan& p = block_plan;
  p = {};
  p.depth = depth;
  // Every list has a size that depends on the shape alone (padded with -1, the steps with
  // padding rows), so one captured graph replays any draft of its shape.
  const auto drafting = static_cast<int64_t>(pairs.drafting_slots.size());
  p.rows = pairs.rows;
  p.drafting_rows = pairs.drafting_rows;
  PG_ASSIGN_OR_RETURN(p.gather_step, PlaceRows(meta, pairs.gather_src, pairs.gather_dst, p.rows));
  PG_ASSIGN_OR_RETURN(p.gather_pending, PlaceRows(meta, pairs.pending_src, pairs.pending_dst, p.rows));
  PG_ASSIGN_OR_RETURN(p.keep_pending, PlaceRows(meta, pairs.keep_src, pairs.keep_dst, slots));
  DraftShape shape;
  shape.num_drafting = drafting;
  shape.rows = p.rows;
  shape.drafting_rows = p.drafting_rows;
  shape.num_steps = num_steps;
  if (pairs.views.empty()) return shape;

  // main_x of pair t onto each of its hc streams (rows t * hc + j of the streams).
  const int64_t hc = c.hc_mult;
  std::vector<int32_t> spread_src, spread_dst;
  const auto num_pairs = static_cast<int64_t>(pairs.gather_src.size() + pairs.pending_src.size());
  for (int64_t t = 0; t < num_pairs; ++t)
    for (int64_t j = 0; j < hc; ++j) {
      spread_src.push_back(static_cast<int32_t>(t));
      spread_dst.push_back(static_cast<int32_t>(t * hc + j));
    }
  PG_ASSIGN_OR_RETURN(p.spread, PlaceRows(meta, spread_src, spread_dst, p.rows * hc));
  // The committed pairs need no logits (the stages' outputs there only fill the windows).
  for (ChunkView& v : pairs.views) v.needs_logits = false;
  PG_ASSIGN_OR_RETURN(StepPlan committed, PlanStep(pairs.views, dc, lim));
  PG_RETURN_IF_ERROR(WritePlan(committed, p.rows, meta).status());
  p.committed = layout;
  p.chunks = p.rows;  // padding chunks are empty and skipped, as in decode graphs
  if (drafting == 0) return shape;

  // The blocks: drafting slot i's rows are i * depth .. + depth - 1 of the block step.
  p.block_rows = p.drafting_rows * depth;
  p.block_chunks = p.drafting_rows;
  std::vector<std::vector<int32_t>> block_tokens(static_cast<size_t>(drafting));
  std::vector<int32_t> ring_src, ring_dst;
  const int64_t w = c.sliding_window;
  std::vector<ChunkView> views;
  for (int64_t i = 0; i < drafting; ++i) {
    std::vector<int32_t>& ids = block_tokens[static_cast<size_t>(i)];
    ids.assign(static_cast<size_t>(depth), static_cast<int32_t>(c.dspark_noise_token_id));
    ids[0] = pairs.last_next[static_cast<size_t>(i)];
    ChunkView v;
    v.slot = pairs.drafting_slots[static_cast<size_t>(i)];
    v.first_position = pairs.next_local[static_cast<size_t>(i)];
    v.num_tokens = depth;
    v.tokens = ids;
    v.needs_logits = true;
    views.push_back(v);
    for (int64_t k = 0; k < depth; ++k) {
      ring_src.push_back(static_cast<int32_t>(v.slot * w + (v.first_position + k) % w));
      ring_dst.push_back(static_cast<int32_t>(i * depth + k));
    }
  }
  PG_ASSIGN_OR_RETURN(p.ring, PlaceRows(meta, ring_src, ring_dst, p.block_rows));
  PG_ASSIGN_OR_RETURN(StepPlan blocks, PlanStep(views, dc, lim));
  PG_RETURN_IF_ERROR(WritePlan(blocks, p.block_rows, meta).status());
  p.block = layout;
  // Logits rows depth-major, so that each depth's rows are contiguous; padding rows read zeros.
  p.logit_rows = meta.Place(p.block_rows);
  p.before = meta.Place(p.drafting_rows);
  p.iota = meta.Place(p.drafting_rows);
  if (p.logit_rows < 0 || p.before < 0 || p.iota < 0) return Internal("draft metadata exceeds its buffer");
  for (int64_t k = 0; k < depth; ++k)
    for (int64_t i = 0; i < p.drafting_rows; ++i)
      meta.host(p.logit_rows)[k * p.drafting_rows + i] = i < drafting ? static_cast<int32_t>(i * depth + k) : -1;
  for (int64_t i = 0; i < p.drafting_rows; ++i) {
    meta.host(p.before)[i] = i < drafting ? pairs.last_next[static_cast<size_t>(i)] : -1;
    meta.host(p.iota)[i] = static_cast<int32_t>(i);
  }
  return shape;
}

Status CudaModel::Impl::EnqueueBlockDraft(const StepMeta& step_meta, cudaStream_t s) {
  const ModelConfig& c = config;
  meta = &step_meta;
  stream = s;
  profiler = nullptr;
  const BlockPlan& p = block_plan;
  const DeviceBlockDrafter& bw = *block;
  const int64_t n = limits.max_tokens, hc = c.hc_mult, d = c.hidden_size, slots = pools.num_slots;
  const int64_t width = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * d;
  const auto stages = static_cast<int64_t>(bw.stages.size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Every pair's taps before the new pending rows replace the old ones.
  PG_RETURN_IF_ERROR(CopyRowsOf(p.gather_step, View(taps, DType::kBF16, {n, width}), block_in.view));
  PG_RETURN_IF_ERROR(CopyRowsOf(p.gather_pending, block_pending.view, block_in.view));
  PG_RETURN_IF_ERROR(CopyRowsOf(p.keep_pending, View(taps, DType::kBF16, {n, width}), block_pending.view));
  if (p.rows == 0) return Status::Ok();

  // The committed pairs through the stages: main_x = main_norm(main_proj(taps)) on every stream.
  layout = p.committed;
  const Tensor x = View(block_x, DType::kF32, {p.rows, d});
  PG_RETURN_IF_ERROR(pc::Linear(blas, {View(block_in, DType::kBF16, {p.rows, width}), bw.main_proj.view, x}, s));
  PG_RETURN_IF_ERROR(pc::RmsNorm({x, bw.main_norm.view, x, eps}, s));
  PG_RETURN_IF_ERROR(CopyRowsOf(p.spread, x, View(ws.streams, DType::kF32, {p.rows * hc, d})));
  for (int64_t st = 0; st < stages; ++st) PG_RETURN_IF_ERROR(EnqueueLayer(c.num_layers + st, p.rows, p.chunks));
  if (p.drafting_rows == 0) return Status::Ok();

  // The blocks, their ring rows kept aside.
  layout = p.block;
  const int64_t saved_rows = slots * c.dspark_block_size, hd = c.head_dim;
  auto saved = [&](int64_t st) {
    return ViewAt(block_ring_save, st * saved_rows * hd * 2, DType::kBF16, {saved_rows, hd});
  };
  for (int64_t st = 0; st < stages; ++st)
    PG_RETURN_IF_ERROR(CopyRowsOf(p.ring, drafter_kv[static_cast<size_t>(st)].window, saved(st)));
  pc::EmbeddingArgs e;
  e.token_ids = MetaView(layout.token_ids, {p.block_rows});
  e.table = weights.embed.view;
  e.streams = View(ws.streams, DType::kF32, {p.block_rows, hc, d});
  PG_RETURN_IF_ERROR(pc::EmbeddingLookup(e, s));
  for (int64_t st = 0; st < stages; ++st)
    PG_RETURN_IF_ERROR(EnqueueLayer(c.num_layers + st, p.block_rows, p.block_chunks));
  layout.logit_rows = p.logit_rows;
  PG_RETURN_IF_ERROR(EnqueueHead(p.block_rows, p.block_rows, /*drafter=*/true));

  // Depth by depth: the Markov term of the token before, added inside the candidates pass.
  const int64_t b = p.drafting_rows, vocab = c.vocab_size;
  const Tensor r = View(block_r, DType::kBF16, {b, c.dspark_markov_rank});
  const Tensor markov = View(block_markov, DType::kF32, {b, vocab});
  for (int64_t k = 0; k < p.depth; ++k) {
    const Tensor before = k == 0 ? MetaView(p.before, {b}) : View(sample_tokens, DType::kI32, {b});
    PG_RETURN_IF_ERROR(pc::CopyRows({bw.markov_w1.view, r, before, MetaView(p.iota, {b})}, s));
    PG_RETURN_IF_ERROR(pc::Linear(blas, {r, bw.markov_w2.view, markov}, s));
    PG_RETURN_IF_ERROR(EnqueueDepthCandidates(ViewAt(ws.logits, k * b * vocab * 4, DType::kF32, {b, vocab}), markov, b, k));
  }
  for (int64_t st = 0; st < stages; ++st)
    PG_RETURN_IF_ERROR(CopyRowsOf(p.ring, saved(st), drafter_kv[static_cast<size_t>(st)].window, /*reverse=*/true));
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4::cuda
