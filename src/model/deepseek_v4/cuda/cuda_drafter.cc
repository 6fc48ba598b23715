// The checkpoint's MTP layer as the speculative drafter on the device (CudaModel::PlanDraft,
// EnqueueDraft): the same computation as the CPU model's MtpRun (../speculative.cc), run
// right after a target step on that step's final streams.
//
// A call runs drafter step 0 over every input's pairs (the final streams of a committed row
// and the token after it; each slot's drafter state, its window ring in the "mtp_window"
// pool, advances over them), then steps 1 .. num_steps - 1 over the drafting inputs only,
// each continuing from its previous step's row with the greedy token of that step. Chain
// steps write ring rows of positions that are not committed: those rows are copied aside
// first and put back after the last step. Tokens chain on the device (no host round trip).
//
// Positions: a slot's drafter runs at positions relative to where it (re)started
// (mtp_floor), so its window holds only rows of the sequence it follows; window attention
// with RoPE depends on offsets only.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/copy_rows.h"
#include "backend/cuda/ops/embedding.h"
#include "backend/cuda/ops/hyper_connection.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/rms_norm.h"
#include "backend/cuda/ops/sampling.h"
#include "kernels/draft_candidates.cuh"
#include "model/deepseek_v4/cuda/cuda_model_impl.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4::cuda {

namespace {

constexpr int64_t kMaxCandidates = kernels::kDraftMaxCandidates;

}  // namespace

Status CudaModel::Impl::AllocateDrafter() {
  const int64_t n = limits.max_tokens, hc = config.hc_mult, d = config.hidden_size, hd = config.head_dim;
  const int64_t slots = pools.num_slots, steps = limits.max_draft_steps;
  auto alloc = [&](DType dtype, Shape shape, DeviceTensor* out) { return AllocateTensor(dtype, shape, out); };
  // What both drafters leave: each depth's greedy token and candidates, per slot.
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {slots, steps}, &draft_out));
  const int64_t k = limits.draft_candidates;
  if (k < 1 || k > kMaxCandidates)
    return InvalidArgument("drafter candidates per depth must be in [1, " + std::to_string(kMaxCandidates) + "]");
  if (k > 1) {
    PG_RETURN_IF_ERROR(alloc(DType::kI32, {slots, steps, k}, &draft_cand_tokens));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {slots, steps, k}, &draft_cand_logprobs));
  }
  // Each drafting slot's greedy token of the latest depth (the next depth's input).
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {slots}, &sample_tokens));
  mtp_floor.assign(static_cast<size_t>(slots), 0);
  if (block.has_value()) return AllocateBlockDrafter();
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc, d}, &mtp_h));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, d}, &mtp_e));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n * hc, d}, &mtp_hn));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc}, &mtp_post));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc, hc}, &mtp_comb));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {slots, hc, d}, &mtp_pending));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {std::max<int64_t>(slots * (steps - 1), 1), hd}, &mtp_ring_save));
  // The pairs' streams get e added on every stream: the mHC post-mix with post = 1 and comb = I.
  std::vector<float> ones(static_cast<size_t>(n * hc), 1.0f), identity(static_cast<size_t>(n * hc * hc), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < hc; ++j) identity[static_cast<size_t>((t * hc + j) * hc + j)] = 1.0f;
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(mtp_post.view.data, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(mtp_comb.view.data, identity.data(), identity.size() * 4, cudaMemcpyHostToDevice));
  return Status::Ok();
}

bool CudaModel::has_drafter() const { return impl_->drafts(); }

Tensor CudaModel::draft_tokens() const {
  const Impl& m = *impl_;
  return m.drafts() ? m.draft_out.view : Tensor{};
}

Tensor CudaModel::draft_candidate_tokens() const { return impl_->draft_cand_tokens.view; }
Tensor CudaModel::draft_candidate_logprobs() const { return impl_->draft_cand_logprobs.view; }

int64_t CudaModel::draft_meta_capacity() const {
  const Impl& m = *impl_;
  if (m.block.has_value()) {
    // The committed pairs' step, the blocks' step (slots x block rows), the row lists.
    const int64_t n = m.limits.max_tokens, slots = m.pools.num_slots;
    return meta_capacity(n, n) + meta_capacity(slots * m.config.dspark_block_size, slots) + m.block_list_ints();
  }
  if (!m.mtp.has_value()) return 0;
  const int64_t n = m.limits.max_tokens, slots = m.pools.num_slots, steps = m.limits.max_draft_steps;
  // Step 0 over up to n pairs, one row per slot for each chain step, and the row lists.
  return meta_capacity(n, n) + (steps - 1) * (meta_capacity(slots, slots) + slots + 4) +
         2 * (2 * n + 2 * slots + slots * steps) + 64;
}

Result<CudaModel::Impl::RowCopies> CudaModel::Impl::PlaceRows(StepMeta& meta, std::span<const int32_t> src,
                                                               std::span<const int32_t> dst, int64_t n) {
  RowCopies c;
  c.n = n;
  c.src = meta.Place(c.n);
  c.dst = meta.Place(c.n);
  if (c.src < 0 || c.dst < 0 || static_cast<int64_t>(src.size()) > n || src.size() != dst.size())
    return Internal("draft metadata exceeds its buffer");
  std::fill_n(std::copy(src.begin(), src.end(), meta.host(c.src)), n - static_cast<int64_t>(src.size()), -1);
  std::fill_n(std::copy(dst.begin(), dst.end(), meta.host(c.dst)), n - static_cast<int64_t>(dst.size()), -1);
  return c;
}

Status CudaModel::Impl::CopyRowsOf(const RowCopies& c, const Tensor& src, const Tensor& dst, bool reverse) {
  if (c.n == 0) return Status::Ok();
  const Tensor a = MetaView(c.src, {c.n}), b = MetaView(c.dst, {c.n});
  return pc::CopyRows({src, dst, reverse ? b : a, reverse ? a : b}, stream);
}

Result<CudaModel::Impl::DraftPairs> CudaModel::Impl::GatherDraftPairs(std::span<const DevicePairs> inputs,
                                                                       int64_t drafted) {
  if (!bound) return Internal("CUDA model: a draft before the KV pools were bound");
  const int64_t slots = pools.num_slots;
  std::vector<uint8_t> seen(static_cast<size_t>(slots), 0);
  for (const DevicePairs& in : inputs) {
    if (in.slot < 0 || in.slot >= slots || seen[static_cast<size_t>(in.slot)])
      return InvalidArgument("a draft input's slot is out of range or repeated");
    seen[static_cast<size_t>(in.slot)] = 1;
    if (in.rows.size() != in.next.size()) return InvalidArgument("a draft input needs one next token per row");
    for (size_t j = 0; j < in.rows.size(); ++j) {
      if (in.rows[j] < -1 || in.rows[j] >= last_step_rows || (in.rows[j] == -1 && j > 0))
        return InvalidArgument("a draft pair's row is outside the last step (or a pending row not first)");
      if (in.next[j] < 0 || in.next[j] >= config.vocab_size) return InvalidArgument("draft token id out of range");
    }
    if (in.pending_row < -1 || in.pending_row >= last_step_rows) return InvalidArgument("pending row out of range");
    if (in.draft && in.rows.empty()) return InvalidArgument("drafting needs a pair to draft from");
    const int64_t floor = in.restart ? in.first_position : mtp_floor[static_cast<size_t>(in.slot)];
    const int64_t local = in.first_position - floor;
    const int64_t end = local + static_cast<int64_t>(in.rows.size()) + (in.draft ? drafted : 0);
    if (local < 0 || end > limits.max_context) return InvalidArgument("draft positions outside the context");
  }
  DraftPairs d;
  int64_t pairs = 0;
  for (const DevicePairs& in : inputs) {
    int64_t& floor = mtp_floor[static_cast<size_t>(in.slot)];
    if (in.restart) floor = in.first_position;
    const auto n = static_cast<int64_t>(in.rows.size());
    if (n > 0) {
      ChunkView v;
      v.slot = in.slot;
      v.first_position = in.first_position - floor;
      v.num_tokens = n;
      v.tokens = in.next;
      v.needs_logits = in.draft;
      d.views.push_back(v);
      for (int64_t j = 0; j < n; ++j) {
        const int32_t row = in.rows[static_cast<size_t>(j)];
        (row >= 0 ? d.gather_src : d.pending_src).push_back(row >= 0 ? row : in.slot);
        (row >= 0 ? d.gather_dst : d.pending_dst).push_back(static_cast<int32_t>(pairs + j));
      }
      if (in.draft) {
        d.drafting_slots.push_back(in.slot);
        d.last_rows.push_back(static_cast<int32_t>(pairs + n - 1));
        d.last_next.push_back(in.next.back());
        d.next_local.push_back(v.first_position + n);
      }
      pairs += n;
    }
    if (in.pending_row >= 0) {
      d.keep_src.push_back(in.pending_row);
      d.keep_dst.push_back(in.slot);
    }
  }
  const auto drafting = static_cast<int64_t>(d.drafting_slots.size());
  d.rows = d.views.empty() ? 0 : std::min(PowerOfTwoAtLeast(pairs), limits.max_tokens);
  d.drafting_rows = drafting > 0 ? std::min(PowerOfTwoAtLeast(drafting), slots) : 0;
  return d;
}

Result<DeviceModel::DraftShape> CudaModel::PlanDraft(std::span<const DevicePairs> inputs, int32_t num_steps,
                                                     StepMeta& meta) {
  Impl& m = *impl_;
  if (m.block.has_value()) return m.PlanBlockDraft(inputs, num_steps, meta);
  if (!m.mtp.has_value()) return Unimplemented("this model has no drafter on the device");
  if (num_steps < 1 || num_steps > m.limits.max_draft_steps)
    return InvalidArgument("draft steps must be in [1, " + std::to_string(m.limits.max_draft_steps) + "]");
  PG_ASSIGN_OR_RETURN(Impl::DraftPairs pairs, m.GatherDraftPairs(inputs, num_steps - 1));
  const int64_t slots = m.pools.num_slots;
  const ModelConfig mc = MtpLayerConfig(m.config);
  StepLimits lim;
  lim.num_slots = slots;
  lim.max_tokens = m.limits.max_tokens;
  lim.max_context = m.limits.max_context;
  Impl::DraftPlan& p = m.draft;
  p = {};
  p.num_steps = num_steps;
  std::vector<ChunkView>& views = pairs.views;
  const std::vector<int32_t>& drafting_slots = pairs.drafting_slots;
  const std::vector<int32_t>& last_rows = pairs.last_rows;
  const std::vector<int64_t>& next_local = pairs.next_local;
  // Every section has a size that depends on the shape alone (lists padded with -1, steps
  // with padding rows), so one captured graph replays any draft of its shape.
  const auto drafting = static_cast<int64_t>(drafting_slots.size());
  const int64_t rows0 = pairs.rows, drafting_rows = pairs.drafting_rows;
  auto place = [&](const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                   int64_t n) -> Result<Impl::RowCopies> { return m.PlaceRows(meta, src, dst, n); };
  PG_ASSIGN_OR_RETURN(p.gather_step, place(pairs.gather_src, pairs.gather_dst, rows0));
  PG_ASSIGN_OR_RETURN(p.gather_pending, place(pairs.pending_src, pairs.pending_dst, rows0));
  PG_ASSIGN_OR_RETURN(p.keep_pending, place(pairs.keep_src, pairs.keep_dst, slots));
  DraftShape shape;
  shape.num_drafting = drafting;
  shape.rows = rows0;
  shape.drafting_rows = drafting_rows;
  shape.num_steps = num_steps;
  if (views.empty()) return shape;

  p.drafting_rows = drafting_rows;
  auto plan_step = [&](std::span<const ChunkView> step_views, int64_t rows) -> Status {
    PG_ASSIGN_OR_RETURN(StepPlan plan, PlanStep(step_views, mc, lim));
    PG_ASSIGN_OR_RETURN(DeviceStep step, m.WritePlan(plan, rows, meta));
    p.steps.push_back(m.layout);
    p.rows.push_back(step.rows);
    p.chunks.push_back(rows);  // padding chunks are empty and skipped, as in decode graphs
    return Status::Ok();
  };
  PG_RETURN_IF_ERROR(plan_step(views, rows0));
  p.chain.emplace_back();
  // Chain steps: one row per drafting slot, its token the previous step's (fed on the device).
  const std::vector<int32_t> unknown(static_cast<size_t>(drafting), 0);
  std::vector<int32_t> rows_in_order(static_cast<size_t>(drafting));
  for (int64_t d = 0; d < drafting; ++d) rows_in_order[static_cast<size_t>(d)] = static_cast<int32_t>(d);
  std::vector<int32_t> ring_src, ring_dst;
  const int64_t w = m.config.sliding_window;
  for (int32_t k = 1; k < num_steps && drafting > 0; ++k) {
    views.clear();
    for (int64_t d = 0; d < drafting; ++d) {
      ChunkView v;
      v.slot = drafting_slots[static_cast<size_t>(d)];
      v.first_position = next_local[static_cast<size_t>(d)] + k - 1;
      v.num_tokens = 1;
      v.tokens = std::span<const int32_t>(unknown).subspan(static_cast<size_t>(d), 1);
      v.needs_logits = true;
      views.push_back(v);
      // The ring row this chain position overwrites, kept aside until the chain is done.
      ring_src.push_back(static_cast<int32_t>(v.slot * w + v.first_position % w));
      ring_dst.push_back(static_cast<int32_t>(d * (m.limits.max_draft_steps - 1) + (k - 1)));
    }
    PG_ASSIGN_OR_RETURN(Impl::RowCopies chain,
                        place(k == 1 ? last_rows : rows_in_order, rows_in_order, drafting_rows));
    p.chain.push_back(chain);
    PG_RETURN_IF_ERROR(plan_step(views, drafting_rows));
  }
  PG_ASSIGN_OR_RETURN(p.ring, place(ring_src, ring_dst, drafting_rows * (num_steps - 1)));
  return shape;
}

Status CudaModel::EnqueueDraft(const StepMeta& meta, cudaStream_t stream) {
  Impl& m = *impl_;
  if (m.block.has_value()) return m.EnqueueBlockDraft(meta, stream);
  if (!m.mtp.has_value()) return Unimplemented("this model has no drafter on the device");
  m.meta = &meta;
  m.stream = stream;
  m.profiler = nullptr;
  const Impl::DraftPlan& p = m.draft;
  const int64_t n = m.limits.max_tokens, hc = m.config.hc_mult, d = m.config.hidden_size;
  const int64_t slots = m.pools.num_slots;
  const Tensor streams = View(m.ws.streams, DType::kF32, {n, hc * d});
  const Tensor pairs_h = View(m.mtp_h, DType::kF32, {n, hc * d});
  const Tensor pending = View(m.mtp_pending, DType::kF32, {slots, hc * d});
  const Tensor saved = m.mtp_ring_save.view;
  auto copy = [&](const Impl::RowCopies& c, const Tensor& src, const Tensor& dst, bool reverse = false) -> Status {
    return m.CopyRowsOf(c, src, dst, reverse);
  };
  // Every pair's streams before the new pending rows replace the old ones.
  PG_RETURN_IF_ERROR(copy(p.gather_step, streams, pairs_h));
  PG_RETURN_IF_ERROR(copy(p.gather_pending, pending, pairs_h));
  PG_RETURN_IF_ERROR(copy(p.keep_pending, streams, pending));
  for (size_t k = 0; k < p.steps.size(); ++k) {
    // Step 0's rows are committed; the chain's ring rows are put back after it.
    if (k == 1) PG_RETURN_IF_ERROR(copy(p.ring, m.drafter_kv[0].window, saved));
    if (k > 0) {
      // Continue from each drafting slot's previous row, with the token drafted there.
      PG_RETURN_IF_ERROR(copy(p.chain[k], streams, pairs_h));
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta.device(p.steps[k].token_ids), m.sample_tokens.view.data,
                                              static_cast<size_t>(p.drafting_rows) * 4, cudaMemcpyDeviceToDevice,
                                              stream));
    }
    m.layout = p.steps[k];
    PG_RETURN_IF_ERROR(m.EnqueueDraftStep(static_cast<int64_t>(k)));
  }
  return p.steps.size() > 1 ? copy(p.ring, saved, m.drafter_kv[0].window, /*reverse=*/true) : Status::Ok();
}

Status CudaModel::Impl::EnqueueDraftStep(int64_t k) {
  const ModelConfig& c = config;
  const int64_t rows = draft.rows[static_cast<size_t>(k)];
  const int64_t chunks = draft.chunks[static_cast<size_t>(k)];
  const int64_t hc = c.hc_mult, d = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const DeviceMtp& w = *mtp;
  const cudaStream_t s = stream;
  // e = e_proj(enorm(embed(next token))) into f.
  pc::EmbeddingArgs e;
  e.token_ids = MetaView(layout.token_ids, {rows});
  e.table = weights.embed.view;
  e.streams = View(mtp_e, DType::kF32, {rows, 1, d});
  PG_RETURN_IF_ERROR(pc::EmbeddingLookup(e, s));
  const Tensor x = View(ws.x, DType::kBF16, {rows, d});
  PG_RETURN_IF_ERROR(pc::RmsNorm({View(mtp_e, DType::kF32, {rows, d}), w.enorm.view, x, eps}, s));
  const Tensor f = View(ws.f, DType::kBF16, {rows, d});
  PG_RETURN_IF_ERROR(pc::Linear(blas, {x, w.e_proj.view, f}, s));
  // Every stream: h_proj(hnorm(stream)) + e.
  const Tensor hn = View(mtp_hn, DType::kBF16, {rows * hc, d});
  PG_RETURN_IF_ERROR(pc::RmsNorm({View(mtp_h, DType::kF32, {rows * hc, d}), w.hnorm.view, hn, eps}, s));
  PG_RETURN_IF_ERROR(pc::Linear(blas, {hn, w.h_proj.view, View(ws.streams, DType::kF32, {rows * hc, d})}, s));
  pc::HcPostArgs add;
  add.streams = View(ws.streams, DType::kF32, {rows, hc, d});
  add.f = f;
  add.post = View(mtp_post, DType::kF32, {rows, hc});
  add.comb = View(mtp_comb, DType::kF32, {rows, hc, hc});
  PG_RETURN_IF_ERROR(pc::HyperConnectionPost(add, s));
  // The decoder layer, then the drafter's head over the drafting rows and their greedy tokens.
  PG_RETURN_IF_ERROR(EnqueueLayer(c.num_layers, rows, chunks));
  // Padding rows of the chain steps sample too (their tokens are never read).
  const int64_t b = draft.drafting_rows;
  if (b == 0) return Status::Ok();
  PG_RETURN_IF_ERROR(EnqueueHead(rows, b, /*drafter=*/true));
  // The greedy token and, for DDTree, depth k's candidates: one pass over each row (the
  // sampling kernel's top-logprobs path took several on one CTA).
  return EnqueueDepthCandidates(View(ws.logits, DType::kF32, {b, c.vocab_size}), Tensor{}, b, k);
}

Status CudaModel::Impl::EnqueueDepthCandidates(const Tensor& logits, const Tensor& bias, int64_t b, int64_t k) {
  const int64_t n = limits.draft_candidates;
  pc::DraftCandidatesArgs a;
  a.logits = logits;
  a.bias = bias;
  a.tokens = View(sample_tokens, DType::kI32, {b});
  a.k = n;
  if (n > 1) {
    // Depth k's columns of [slots, max_draft_steps, K].
    a.top_tokens = View(draft_cand_tokens, DType::kI32, {b, limits.max_draft_steps * n});
    a.top_logprobs = View(draft_cand_logprobs, DType::kF32, {b, limits.max_draft_steps * n});
    a.column = k * n;
  }
  PG_RETURN_IF_ERROR(pc::DraftCandidates(a, stream));
  // Column k of draft_out [slots, max_draft_steps].
  const auto pitch = static_cast<size_t>(limits.max_draft_steps) * 4;
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(static_cast<int32_t*>(draft_out.view.data) + k, pitch,
                                            sample_tokens.view.data, 4, 4, static_cast<size_t>(b),
                                            cudaMemcpyDeviceToDevice, stream));
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4::cuda
