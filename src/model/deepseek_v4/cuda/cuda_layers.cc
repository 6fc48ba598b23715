// The sub-layers of one DeepSeek-V4 layer on the CUDA backend, in the order of the CPU
// reference (model.cc, attention.cc, moe.cc), for `rows` tokens of a step; and the head
// (the main model's, or the drafter's mixer and norm before it).
#include <cmath>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/compressor_step.h"
#include "backend/cuda/ops/copy_rows.h"
#include "backend/cuda/ops/fp8_projection.h"
#include "backend/cuda/ops/generic_attention.h"
#include "backend/cuda/ops/hyper_connection.h"
#include "backend/cuda/ops/indexer.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/moe.h"
#include "backend/cuda/ops/output_projection.h"
#include "backend/cuda/ops/rms_norm.h"
#include "backend/cuda/ops/rope.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/swiglu.h"
#include "distributed/communicator.h"
#include "distributed/parallel_config.h"
#include "kernels/indexer_topk.cuh"
#include "model/deepseek_v4/cuda/cuda_model_impl.h"

namespace peregrine::deepseek_v4::cuda {

namespace {

int64_t Index(AttentionType t) {
  switch (t) {
    case AttentionType::kSliding: return 0;
    case AttentionType::kCompressedSparse: return 1;
    case AttentionType::kHeavilyCompressed: return 2;
  }
  return 0;
}

// y = x . w^T for a dense projection in either format (fp8: W8A16 for decode-sized row
// counts, cuBLASLt above; backend/cuda/ops/fp8_projection.h).
Status ProjectWith(pc::Blas& blas, const Tensor& fp8_workspace, const Tensor& x, const DeviceProjection& p,
                   const Tensor& y, cudaStream_t stream) {
  if (!p.is_fp8()) return pc::Linear(blas, {x, p.w.view, y}, stream);
  return pc::Fp8Projection(blas, {x, p.w.view, p.scale.view, y, fp8_workspace}, stream);
}

}  // namespace

CudaModel::Impl::LayerRefs CudaModel::Impl::LayerAt(int64_t i) const {
  if (i >= config.num_layers) {
    const auto s = static_cast<size_t>(i - config.num_layers);
    return {block.has_value() ? &block->stages[s] : &mtp->layer, &drafter_kv[s], nullptr, AttentionType::kSliding,
            MoeType::kLearned};
  }
  const auto at = static_cast<size_t>(i);
  return {&weights.layers[at], &kv[at], stages.empty() ? nullptr : &stages[at], config.layer_types[at],
          config.mlp_layer_types[at]};
}

Status CudaModel::Impl::EnqueueLayer(int64_t i, int64_t rows, int64_t chunks) {
  const ModelConfig& c = config;
  const DeviceLayer& lw = *LayerAt(i).weights;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  const Tensor streams = View(ws.streams, DType::kF32, {rows, hc, d});
  const Tensor x = View(ws.x, DType::kBF16, {rows, d});
  const Tensor f = View(ws.f, DType::kBF16, {rows, d});
  const Tensor post = View(ws.post, DType::kF32, {rows, hc});
  const Tensor comb = View(ws.comb, DType::kF32, {rows, hc, hc});
  auto pre = [&](const DeviceHyperConnection& w, const DeviceTensor& norm) {
    return Op(OpKind::kMhc, [&] {
      pc::HcPreArgs a;
      a.streams = streams;
      a.fn = w.fn.view;
      a.base = w.base.view;
      a.scale = w.scale.view;
      a.norm_weight = norm.view;
      a.x = x;
      a.post = post;
      a.comb = comb;
      a.workspace = ws.hc_workspace.view;
      a.hc_eps = static_cast<float>(c.hc_eps);
      a.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
      a.sinkhorn_iters = static_cast<int>(c.hc_sinkhorn_iters);
      a.batch_invariant = limits.batch_invariant;
      return pc::HyperConnectionPre(a, stream);
    });
  };
  // After the MoE, f is the experts' combine: formed inside the expansion unless it must be
  // all-reduced first (more than one rank).
  const bool fuse_combine = parallel.size <= 1;
  auto post_mix = [&](bool moe_combine) {
    return Op(OpKind::kMhc, [&] {
      pc::HcPostArgs a;
      a.streams = streams;
      a.post = post;
      a.comb = comb;
      if (moe_combine) {
        const int64_t k = c.num_experts_per_tok;
        a.moe_y = View(ws.expert_y, DType::kF32, {rows * k, d});
        a.moe_topk_ids = View(ws.topk_ids, DType::kI32, {rows, k});
        a.moe_topk_weights = View(ws.topk_weights, DType::kF32, {rows, k});
        a.moe_shared = View(ws.shared_y, DType::kBF16, {rows, d});
      } else {
        a.f = f;
      }
      return pc::HyperConnectionPost(a, stream);
    });
  };
  PG_RETURN_IF_ERROR(pre(lw.hc_attn, lw.attn_norm));
  PG_RETURN_IF_ERROR(EnqueueAttention(i, rows, chunks));
  PG_RETURN_IF_ERROR(post_mix(false));
  PG_RETURN_IF_ERROR(pre(lw.hc_ffn, lw.ffn_norm));
  PG_RETURN_IF_ERROR(EnqueueMoe(i, rows, fuse_combine));
  return post_mix(fuse_combine);
}

Status CudaModel::Impl::EnqueueAttention(int64_t i, int64_t rows, int64_t chunks) {
  const ModelConfig& c = config;
  const LayerRefs refs = LayerAt(i);
  const DeviceLayer& lw = *refs.weights;
  const LayerKv& st = *refs.kv;
  const LayerStage* stage = refs.stage;
  const bool trees = layout.tree_rows >= 0 && stage != nullptr;  // the step verifies draft trees
  const AttentionType type = refs.attention;
  const bool sliding = type == AttentionType::kSliding;
  const bool csa = type == AttentionType::kCompressedSparse;
  const int64_t d = c.hidden_size;
  const int64_t h = weights.heads;  // this rank's query heads
  const int64_t hd = c.head_dim;
  const int64_t w = c.sliding_window;
  const int64_t ih = c.index_n_heads;
  const int64_t id = c.index_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  cudaStream_t s = stream;  // where the helpers below enqueue: `stream` or the branch
  const DeviceTensor& cos = sliding ? main_cos : compress_cos;
  const DeviceTensor& sin = sliding ? main_sin : compress_sin;
  const Tensor x = View(ws.x, DType::kBF16, {rows, d});
  const Tensor positions = MetaView(layout.positions, {rows});
  const int64_t scratch_row = pools.num_slots * w;
  const Tensor window = st.window;
  const Tensor new_kv = Tensor::Contiguous(static_cast<char*>(st.window.data) + scratch_row * hd * 2, DType::kBF16,
                                           {rows, hd}, Device::kCuda);
  auto linear = [&](const Tensor& in, const Tensor& wt, const Tensor& out) {
    return Op(OpKind::kProjection, [&] { return pc::Linear(BlasOn(s), {in, wt, out}, s); });
  };
  auto project = [&](const Tensor& in, const DeviceProjection& p, const Tensor& out) {
    return Op(OpKind::kProjection, [&] { return ProjectWith(BlasOn(s), weights.fp8_workspace.view, in, p, out, s); });
  };
  auto norm = [&](const Tensor& in, const Tensor& weight, const Tensor& out) {
    return Op(OpKind::kNorm, [&] { return pc::RmsNorm({in, weight, out, eps}, s); });
  };
  auto rope = [&](const Tensor& t, bool inverse) {
    return Op(OpKind::kRope, [&] {
      pc::RopeArgs a;
      a.x = t;
      a.positions = positions;
      a.cos = cos.view;
      a.sin = sin.view;
      a.rope_dim = c.rope_head_dim;
      a.inverse = inverse;
      return pc::Rope(a, s);
    });
  };
  // The norm with RoPE fused on its output (rows of one position each, or `heads` per
  // position); two launches where the widths are not multiples of 8. `fp8_nope` > 0 (a KV row
  // with --kv-cache-dtype fp8, whose widths are multiples of 8): those leading values round-trip
  // through V4's FP8 format as they are stored.
  auto norm_rope = [&](const Tensor& in, const Tensor& weight, const Tensor& out, int64_t fp8_nope = 0) -> Status {
    if (fp8_nope == 0 && (c.rope_head_dim % 8 != 0 || out.shape[1] % 8 != 0)) {
      PG_RETURN_IF_ERROR(norm(in, weight, out));
      return rope(out, false);
    }
    return Op(OpKind::kNorm, [&] {
      pc::RmsNormArgs a{in, weight, out, eps};
      a.rope_positions = positions;
      a.rope_cos = cos.view;
      a.rope_sin = sin.view;
      a.rope_dim = c.rope_head_dim;
      a.fp8_nope = fp8_nope;
      return pc::RmsNorm(a, s);
    });
  };

  // q: low-rank, normed, per-head normed, rotated (on `stream`). kv: one shared row, normed
  // and rotated, written straight into the step's rows of the window buffer; then the
  // compressors and the indexer (on the branch when the step forks; the indexer's query
  // waits for q's low-rank part).
  PG_ASSIGN_OR_RETURN(const cudaStream_t branch, Fork(rows));
  BranchScope join(*this, branch);
  const Tensor qr = View(ws.qr, DType::kF32, {rows, c.q_lora_rank});
  const Tensor qr_n = View(ws.qr_n, DType::kBF16, {rows, c.q_lora_rank});
  PG_RETURN_IF_ERROR(project(x, lw.wq_a, qr));
  PG_RETURN_IF_ERROR(norm(qr, lw.q_norm.view, qr_n));
  if (branch != stream) PG_RETURN_IF_ERROR(ready_event.Record(stream));
  s = branch;
  const Tensor kv = View(ws.kv, DType::kF32, {rows, hd});
  PG_RETURN_IF_ERROR(project(x, lw.wkv, kv));
  PG_RETURN_IF_ERROR(norm_rope(kv, lw.kv_norm.view, new_kv, limits.kv_cache_fp8 ? hd - c.rope_head_dim : 0));

  // Compressors: append this step's tokens, emit the entries of completed blocks.
  // kv_gate_buf holds the wkv and the wgate projections one after the other ([2, rows, width]),
  // both from one grouped projection.
  auto compress = [&](const DeviceCompressor& cw, const Tensor& kv_ring, const Tensor& gate_ring, const Tensor& cache,
                      const DeviceTensor& kv_gate_buf, float* tail_kv, float* tail_gate, const DeviceTensor* stage_kv,
                      const DeviceTensor* stage_gate, const DeviceTensor* stage_entries) -> Status {
    const int64_t width = cw.coff * cw.dim;
    const Tensor ckv = View(kv_gate_buf, DType::kF32, {rows, width});
    const Tensor cgate = ViewAt(kv_gate_buf, rows * width * 4, DType::kF32, {rows, width});
    PG_RETURN_IF_ERROR(Op(OpKind::kProjection, [&] {
      return pc::GroupedLinear(BlasOn(s), {x, cw.wkv_wgate.view, View(kv_gate_buf, DType::kF32, {2, rows, width})}, s);
    }));
    return Op(OpKind::kCompressor, [&] {
      pc::CompressorStepArgs a;
      a.kv = ckv;
      a.gate = cgate;
      a.ape = cw.ape.view;
      a.kv_state = kv_ring;
      a.gate_state = gate_ring;
      a.token_offsets = MetaView(layout.chunk_offsets, {chunks + 1});
      a.state_slots = MetaView(layout.compress_slots, {chunks});
      a.positions = MetaView(layout.chunk_positions, {chunks});
      a.norm_weight = cw.norm.view;
      a.rope_cos = compress_cos.view;
      a.rope_sin = compress_sin.view;
      a.cache = cache;
      a.page_table = BlockTables();
      a.page_table_rows = MetaView(layout.chunk_slots, {chunks});
      a.ratio = cw.ratio;
      a.coff = cw.coff;
      a.rope_dim = c.rope_head_dim;
      a.eps = eps;
      if (tail_kv != nullptr && pools.num_snapshots > 0) {
        a.snapshot_table = MetaView(layout.snapshot_table, {chunks, layout.max_snapshots});
        a.snapshot_kv = tail_kv;
        a.snapshot_gate = tail_gate;
        a.snapshot_stride = snapshot_floats;
        a.num_snapshots = pools.num_snapshots;
        a.snapshot_interval = geometry.block_tokens;
      }
      if (trees) {
        // Verify nodes stage their rows and entries (the sequential part skips their chunks).
        a.tree_rows = MetaView(layout.tree_rows, {rows});
        a.stage_kv = stage_kv->view;
        a.stage_gate = stage_gate->view;
        a.tree_paths = MetaView(layout.tree_paths, {rows, layout.path_capacity});
        a.tree_slots = MetaView(layout.token_slots, {rows});
        a.tree_positions = positions;
        a.stage_entries = stage_entries->view;
      }
      return pc::CompressorStep(a, s);
    });
  };
  if (lw.compressor)
    PG_RETURN_IF_ERROR(compress(*lw.compressor, st.kv_ring, st.gate_ring, st.cache, ws.ckv, st.tail_kv,
                                st.tail_gate, trees ? &stage->kv : nullptr, trees ? &stage->gate : nullptr,
                                trees ? &stage->entries : nullptr));

  // Indexer (CSA): its own compressor, then scores over the visible keys and the top-k.
  const Tensor topk = View(ws.topk, DType::kI32, {rows, c.index_topk});
  const Tensor topk_counts = View(ws.topk_counts, DType::kI32, {rows});
  if (csa) {
    PG_RETURN_IF_ERROR(compress(*lw.index_compressor, st.index_kv_ring, st.index_gate_ring, st.index_keys, ws.ikv,
                                st.tail_index_kv, st.tail_index_gate, trees ? &stage->index_kv : nullptr,
                                trees ? &stage->index_gate : nullptr, trees ? &stage->index_keys : nullptr));
    if (branch != stream) PG_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(branch, ready_event.get(), 0));
    const Tensor iq = View(ws.iq, DType::kBF16, {rows, ih * id});
    PG_RETURN_IF_ERROR(project(qr_n, lw.index_wq_b, iq));
    PG_RETURN_IF_ERROR(rope(View(ws.iq, DType::kBF16, {rows * ih, id}), false));
    const Tensor iw = View(ws.iw, DType::kF32, {rows, ih});
    PG_RETURN_IF_ERROR(linear(x, lw.index_weights_proj.view, iw));
    for (int64_t r0 = 0; r0 < rows; r0 += index_batch) {
      const int64_t nb = std::min(index_batch, rows - r0);
      pc::IndexerScoresArgs a;
      a.q = ViewAt(ws.iq, r0 * ih * id * 2, DType::kBF16, {nb, ih, id});
      a.weights = ViewAt(ws.iw, r0 * ih * 4, DType::kF32, {nb, ih});
      a.keys = st.index_keys;
      a.page_table = BlockTables();
      a.page_table_rows = MetaView(layout.token_slots + r0, {nb});
      a.num_entries = MetaView(layout.csa_entries + r0, {nb});
      if (trees) {
        a.staged_keys = stage->index_keys.view;
        a.staged_first = MetaView(layout.csa_staged_first + r0, {nb});
        a.staged_table = MetaView(layout.csa_staged + r0 * layout.csa_staged_capacity, {nb, layout.csa_staged_capacity});
      }
      a.scores = View(ws.scores, DType::kF32, {nb, score_stride});
      a.scale = 1.0f / std::sqrt(static_cast<float>(id));
      a.num_ctas = 4 * limits.num_sms;
      PG_RETURN_IF_ERROR(Op(OpKind::kIndexer, [&] {
        return fast_indexer ? pc::IndexerScores(a, s) : pc::IndexerScoresGeneric(a, s);
      }));
      PG_RETURN_IF_ERROR(Op(OpKind::kTopK, [&] {
        pc::IndexerTopKArgs t;
        t.scores = a.scores;
        t.num_entries = a.num_entries;
        t.indices = ViewAt(ws.topk, r0 * c.index_topk * 4, DType::kI32, {nb, c.index_topk});
        t.counts = ViewAt(ws.topk_counts, r0 * 4, DType::kI32, {nb});
        if (ws.topk_workspace.view.data != nullptr)
          t.workspace = View(ws.topk_workspace, DType::kI32, {nb, kernels::kIndexerTopKWorkspaceInts});
        t.num_ctas = limits.num_sms;
        return pc::IndexerTopK(t, s);
      }));
    }
  }

  s = stream;
  const Tensor q = View(ws.q, DType::kF32, {rows, h * hd});
  PG_RETURN_IF_ERROR(project(qr_n, lw.wq_b, q));
  const Tensor q_n = View(ws.q_n, DType::kBF16, {rows, h, hd});
  PG_RETURN_IF_ERROR(
      norm_rope(View(ws.q, DType::kF32, {rows * h, hd}), Tensor{}, View(ws.q_n, DType::kBF16, {rows * h, hd})));
  PG_RETURN_IF_ERROR(join.Join());

  // Sparse attention over the window rows plus the selected (CSA) or all (HCA) entries.
  PG_RETURN_IF_ERROR(Op(OpKind::kAttention, [&] {
    pc::SparseAttentionArgs a;
    a.q = q_n;
    a.window_kv = window;
    a.window_indices = MetaView(layout.window_indices, {rows, w});
    a.window_lengths = MetaView(layout.window_lengths, {rows});
    if (!sliding) {
      a.compressed_kv = st.cache;  // bf16, or u8 FP8 rows (--kv-cache-dtype fp8)
      a.entry_rope_dim = c.rope_head_dim;
      a.page_table = BlockTables();
      a.page_table_rows = MetaView(layout.token_slots, {rows});
      if (csa) {
        a.compressed_indices = topk;
        a.compressed_lengths = topk_counts;
      } else {
        a.compressed_lengths = MetaView(layout.hca_entries, {rows});
      }
      if (trees) {
        const int64_t first = csa ? layout.csa_staged_first : layout.hca_staged_first;
        const int64_t table = csa ? layout.csa_staged : layout.hca_staged;
        const int64_t capacity = csa ? layout.csa_staged_capacity : layout.hca_staged_capacity;
        a.staged_kv = stage->entries.view;
        a.staged_first = MetaView(first, {rows});
        a.staged_table = MetaView(table, {rows, capacity});
      }
    }
    a.sink = lw.sink.view;
    a.positions = positions;
    a.rope_cos = cos.view;
    a.rope_sin = sin.view;
    a.rope_dim = c.rope_head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.out = View(ws.o, DType::kBF16, {rows, h, hd});
    if (!fast_attention) return pc::SparseAttentionGeneric(a, s);
    a.schedule = MetaView(layout.schedules[static_cast<size_t>(Index(type))], {attention_layout.num_ints()});
    a.layout = attention_layout;
    a.partial_o = View(ws.partial_o, DType::kF32, {attention_layout.max_segments, h, hd});
    a.partial_lse = View(ws.partial_lse, DType::kF32, {attention_layout.max_segments, h});
    return pc::SparseAttentionDecode(a, s);
  }));

  // The chunk's last W rows become the ring's. (On the branch, beside the output projection or
  // the rest of the layer, batch-1 steps were slower: bench/model/NOTES.md.)
  PG_RETURN_IF_ERROR(Op(OpKind::kWindowUpdate, [&] {
    return pc::CopyRows({window, window, MetaView(layout.ring_src, {rows}), MetaView(layout.ring_dst, {rows})}, s);
  }));

  PG_RETURN_IF_ERROR(Op(OpKind::kOutputProjection, [&] {
    pc::OutputProjectionArgs a;
    a.o = View(ws.o, DType::kBF16, {rows, h, hd});
    a.wo_a = lw.wo_a.view;
    a.wo_b = lw.wo_b.w.view;
    a.wo_b_scale = lw.wo_b.scale.view;
    a.fp8_workspace = weights.fp8_workspace.view;
    a.mid = View(ws.mid, DType::kBF16, {rows, lw.wo_a.view.shape[0], c.o_lora_rank});
    a.out = View(ws.f, DType::kBF16, {rows, d});
    return pc::GroupedOutputProjection(blas, a, s);
  }));
  return SumOverRanks(ws.f.view.data, rows * d);
}

Status CudaModel::Impl::EnqueueMoe(int64_t i, int64_t rows, bool leave_combine) {
  const ModelConfig& c = config;
  const LayerRefs refs = LayerAt(i);
  const DeviceLayer& lw = *refs.weights;
  const int64_t d = c.hidden_size;
  const int64_t e = weights.experts;  // this rank's experts (all of them unless EP)
  const int64_t k = c.num_experts_per_tok;
  const int64_t inter = lw.experts.w1.view.shape[1];  // this rank's part of each expert
  const float limit = static_cast<float>(c.swiglu_limit);
  const cudaStream_t s = stream;
  const Tensor x = View(ws.x, DType::kBF16, {rows, d});
  const bool hash = refs.moe == MoeType::kHash;

  // The shared expert (on the branch when the step forks), beside the router and the routed
  // experts; the combine waits for both.
  PG_ASSIGN_OR_RETURN(const cudaStream_t branch, Fork(rows));
  BranchScope join(*this, branch);
  const int64_t shared = lw.shared_w2.w.view.shape[1];
  const Tensor sgu = View(ws.shared_gate_up, DType::kBF16, {rows, 2 * shared});
  const Tensor sh = View(ws.shared_h, DType::kBF16, {rows, shared});
  const Tensor sy = View(ws.shared_y, DType::kBF16, {rows, d});
  PG_RETURN_IF_ERROR(Op(OpKind::kSharedExpert, [&]() -> Status {
    PG_RETURN_IF_ERROR(ProjectWith(BlasOn(branch), weights.fp8_workspace.view, x, lw.shared_w13, sgu, branch));
    pc::SwigluArgs a;
    a.gate_up = sgu;
    a.h = sh;
    a.limit = limit;
    PG_RETURN_IF_ERROR(pc::SwigluClamp(a, branch));
    return ProjectWith(BlasOn(branch), weights.fp8_workspace.view, sh, lw.shared_w2, sy, branch);
  }));
  const bool mxfp4 = lw.experts.format == ExpertFormat::kMXFP4;

  PG_RETURN_IF_ERROR(Op(OpKind::kRouter, [&]() -> Status {
    const Tensor logits = View(ws.router_logits, DType::kF32, {rows, c.num_experts});
    PG_RETURN_IF_ERROR(pc::Linear(blas, {x, lw.gate.view, logits}, s));
    pc::MoeRouteArgs a;
    a.logits = logits;
    if (hash) {
      a.tid2eid = lw.tid2eid.view;
      a.token_ids = MetaView(layout.token_ids, {rows});
    } else {
      a.bias = lw.bias.view;
    }
    a.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
    // EP: ids of this rank's experts become local ones, the others -1 (skipped below; their
    // ranks add them).
    a.local_begin = static_cast<int>(weights.expert_begin);
    a.local_count = static_cast<int>(e);
    a.topk_ids = View(ws.topk_ids, DType::kI32, {rows, k});
    a.topk_weights = View(ws.topk_weights, DType::kF32, {rows, k});
    pc::MoeAlignArgs al;
    al.topk_ids = a.topk_ids;
    al.expert_offsets = View(ws.expert_offsets, DType::kI32, {e + 1});
    al.sorted_assignments = View(ws.sorted_assignments, DType::kI32, {rows * k});
    return pc::MoeRouteAndAlign(a, al, s);
  }));

  const Tensor h = View(ws.expert_h, DType::kBF16, {rows * k, inter});
  const Tensor y = View(ws.expert_y, DType::kF32, {rows * k, d});
  PG_RETURN_IF_ERROR(Op(OpKind::kMoeExperts, [&]() -> Status {
    pc::MoeGateUpArgs g;
    g.x = x;
    g.sorted_assignments = View(ws.sorted_assignments, DType::kI32, {rows * k});
    g.expert_offsets = View(ws.expert_offsets, DType::kI32, {e + 1});
    g.format = mxfp4 ? pc::MoeWeightFormat::kMxfp4 : pc::MoeWeightFormat::kBF16;
    g.w1 = {lw.experts.w1.view, lw.experts.w1_scale.view};
    g.w3 = {lw.experts.w3.view, lw.experts.w3_scale.view};
    g.swiglu_limit = limit;
    g.h = h;
    g.batch_invariant = limits.batch_invariant;
    PG_RETURN_IF_ERROR(pc::MoeGateUp(g, s));
    pc::MoeDownArgs dn;
    dn.h = h;
    dn.sorted_assignments = g.sorted_assignments;
    dn.expert_offsets = g.expert_offsets;
    dn.format = g.format;
    dn.w2 = {lw.experts.w2.view, lw.experts.w2_scale.view};
    dn.y = y;
    dn.batch_invariant = limits.batch_invariant;
    return pc::MoeDown(dn, s);
  }));

  PG_RETURN_IF_ERROR(join.Join());
  if (leave_combine) return Status::Ok();  // the expansion after it combines

  PG_RETURN_IF_ERROR(Op(OpKind::kMoeExperts, [&] {
    pc::MoeCombineArgs a;
    a.y = y;
    a.topk_ids = View(ws.topk_ids, DType::kI32, {rows, k});
    a.topk_weights = View(ws.topk_weights, DType::kF32, {rows, k});
    a.shared = sy;
    a.out = View(ws.f, DType::kBF16, {rows, d});
    return pc::MoeCombine(a, s);
  }));
  return SumOverRanks(ws.f.view.data, rows * d);
}

Status CudaModel::Impl::EnqueueHead(int64_t rows, int64_t logit_rows, bool drafter) {
  const ModelConfig& c = config;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  const bool sharded = parallel.size > 1;
  const int64_t part = weights.head_rows;
  PG_RETURN_IF_ERROR(Op(OpKind::kHead, [&]() -> Status {
    pc::HcHeadArgs a;
    a.streams = View(ws.streams, DType::kF32, {rows, hc, d});
    a.rows = MetaView(layout.logit_rows, {logit_rows});
    const DeviceHyperConnection& mix = !drafter ? weights.hc_head : block.has_value() ? block->hc_head : mtp->hc_head;
    a.fn = mix.fn.view;
    a.base = mix.base.view;
    a.scale = mix.scale.view;
    a.norm_weight = !drafter ? weights.norm.view : block.has_value() ? block->norm.view : mtp->norm.view;
    a.workspace = ws.hc_workspace.view;
    a.y = View(ws.head_x, DType::kBF16, {logit_rows, d});
    a.hc_eps = static_cast<float>(c.hc_eps);
    a.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
    a.batch_invariant = limits.batch_invariant;
    PG_RETURN_IF_ERROR(pc::HyperConnectionHead(a, stream));
    const Tensor out = sharded ? View(ws.head_logits, DType::kF32, {logit_rows, part})
                               : View(ws.logits, DType::kF32, {logit_rows, c.vocab_size});
    return pc::Linear(blas, {View(ws.head_x, DType::kBF16, {logit_rows, d}), weights.head.view, out}, stream);
  }));
  if (!sharded) return Status::Ok();
  // Every rank's part, then each into its columns of the logits (the padding rows of the
  // last parts dropped).
  return Op(OpKind::kCollective, [&]() -> Status {
    PG_RETURN_IF_ERROR(parallel.comm->AllGather(ws.head_logits.view.data, ws.gathered_logits.view.data,
                                                logit_rows * part, DType::kF32));
    for (int r = 0; r < parallel.size; ++r) {
      const distributed::ShardRange v = distributed::PaddedShard(c.vocab_size, r, parallel.size);
      if (v.size() == 0) continue;
      const auto* src = static_cast<const float*>(ws.gathered_logits.view.data) + r * logit_rows * part;
      auto* dst = static_cast<float*>(ws.logits.view.data) + v.begin;
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, static_cast<size_t>(c.vocab_size) * 4, src,
                                                static_cast<size_t>(part) * 4, static_cast<size_t>(v.size()) * 4,
                                                static_cast<size_t>(logit_rows), cudaMemcpyDeviceToDevice, stream));
    }
    return Status::Ok();
  });
}

}  // namespace peregrine::deepseek_v4::cuda
