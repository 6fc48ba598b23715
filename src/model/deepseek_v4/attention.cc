#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/kv_fp8.h"
#include "model/deepseek_v4/layers.h"

namespace peregrine::deepseek_v4 {

namespace {

std::vector<float> Project(cpu::ThreadPool& pool, const float* x, const HostTensor& w, int64_t num_tokens) {
  const int64_t out = w.view.shape[0];
  const int64_t in = w.view.shape[1];
  std::vector<float> y(static_cast<size_t>(num_tokens * out));
  cpu::Linear(pool, x, w.f32(), y.data(), num_tokens, in, out);
  return y;
}

// Rotates every `row_width` row of `rows` rows at one position.
void RopeRows(const RopeTable& rope, int64_t position, float* x, int64_t rows, int64_t row_width, bool inverse) {
  std::vector<float> cos(static_cast<size_t>(rope.rope_dim() / 2)), sin(cos.size());
  rope.Angles(position, cos.data(), sin.data());
  cpu::ApplyRope(x, rows, row_width, rope.rope_dim(), cos.data(), sin.data(), inverse);
}

// Lightning indexer for one query: score(k) = sum_h w_h * relu(q_h . key_k) / sqrt(Id) over
// the visible entries, then the top `topk` (ties to the lower index).
//   q [IH, Id], weights [IH], keys: num_visible pointers to [Id] -> selected entry indices
std::vector<int64_t> IndexerTopK(const float* q, const float* weights, const std::vector<const float*>& keys,
                                 int64_t num_heads, int64_t dim, int64_t topk) {
  const auto num_visible = static_cast<int64_t>(keys.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> score(static_cast<size_t>(num_visible));
  for (int64_t k = 0; k < num_visible; ++k) {
    float acc = 0.0f;
    for (int64_t h = 0; h < num_heads; ++h)
      acc += weights[h] * (std::fmax(cpu::Dot(q + h * dim, keys[static_cast<size_t>(k)], dim), 0.0f) * scale);
    score[static_cast<size_t>(k)] = acc;
  }
  std::vector<int64_t> order(static_cast<size_t>(num_visible));
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep = std::min(topk, num_visible);
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    const float sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a < b;
  });
  order.resize(static_cast<size_t>(keep));
  return order;
}

// One head over gathered rows with an attention sink in the softmax denominator.
//   q [Dh], rows: pointers to [Dh] K=V rows -> out [Dh]
void SinkAttentionHead(const float* q, const std::vector<const float*>& rows, int64_t dim, float scale,
                       float sink, float* out) {
  std::vector<float> logits(rows.size());
  float mx = sink;
  for (size_t j = 0; j < rows.size(); ++j) {
    logits[j] = cpu::Dot(q, rows[j], dim) * scale;
    mx = std::fmax(mx, logits[j]);
  }
  float denom = std::exp(sink - mx);
  for (size_t j = 0; j < rows.size(); ++j) denom += (logits[j] = std::exp(logits[j] - mx));
  std::fill(out, out + dim, 0.0f);
  for (size_t j = 0; j < rows.size(); ++j) {
    const float p = logits[j] / denom;
    for (int64_t e = 0; e < dim; ++e) out[e] += p * rows[j][e];
  }
}

// A layer's projections of every row of the batch (what the walks below read).
struct Projected {
  std::vector<float> q, kv;            // [N, H*Dh], [N, Dh] rotated
  std::vector<float> ckv, cgate;       // [N, coff*Dh] compressor inputs
  std::vector<float> ikv, igate;       // [N, 2*Id] indexer compressor inputs
  std::vector<float> iq, iw;           // [N, IH*Id] rotated, [N, IH] scaled
  std::vector<int64_t> positions;      // [N]
  int64_t num_heads = 0;               // H on this rank (all of them unless tensor parallel)
};

// Every head of one token over its gathered rows, then the rotation undone (K = V carries
// it on the trailing dims) at the token's position.       -> o [H, Dh]
void AttendToken(const AttentionContext& ctx, const AttentionWeights& w, const Projected& pr, int64_t t,
                 const std::vector<const float*>& rows, float* o) {
  const int64_t h_n = pr.num_heads, hd = ctx.config.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t h = 0; h < h_n; ++h)
    SinkAttentionHead(pr.q.data() + (t * h_n + h) * hd, rows, hd, scale, w.sink.f32()[h], o + h * hd);
  RopeRows(ctx.rope, pr.positions[static_cast<size_t>(t)], o, h_n, hd, /*inverse=*/true);
}

// The selected compressed entries of token t: all visible ones (HCA), or the indexer's top-k
// of them (CSA). entry(e) and key(e) give entry e and its index key.
template <typename EntryFn, typename KeyFn>
void AddCompressedRows(const AttentionContext& ctx, const AttentionWeights& w, const Projected& pr, int64_t t,
                       int64_t visible, EntryFn entry, KeyFn key, std::vector<const float*>* rows) {
  const ModelConfig& c = ctx.config;
  if (!w.indexer) {
    for (int64_t e = 0; e < visible; ++e) rows->push_back(entry(e));
    return;
  }
  const int64_t ih_n = c.index_n_heads, id = c.index_head_dim;
  std::vector<const float*> keys;
  keys.reserve(static_cast<size_t>(visible));
  for (int64_t e = 0; e < visible; ++e) keys.push_back(key(e));
  for (int64_t e : IndexerTopK(pr.iq.data() + t * ih_n * id, pr.iw.data() + t * ih_n, keys, ih_n, id, c.index_topk))
    rows->push_back(entry(e));
}

// Token by token: extend the window and the compressors, then attend. Entry k of a
// compressor is visible from position p iff k < (p + 1) / ratio, which is exactly the
// number of entries finished once p itself has been appended.
void AttendRun(const AttentionContext& ctx, const AttentionWeights& w, int64_t layer, const Segment& seg,
               const Projected& pr, float* o) {
  const ModelConfig& c = ctx.config;
  const int64_t h_n = pr.num_heads, hd = c.head_dim, id = c.index_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t window = c.sliding_window;
  CpuKvStore& kvs = *seg.kv;
  float* ring = kvs.Window(layer, seg.slot);
  const int64_t block = kvs.geometry().block_tokens;
  const int64_t first_boundary = seg.first_position / block + 1;
  CompressorRings crings, irings;
  if (w.compressor) {
    crings = {kvs.CompressorKv(layer, seg.slot), kvs.CompressorGate(layer, seg.slot), w.compressor->ratio, hd,
              w.compressor->coff};
  }
  if (w.indexer) {
    irings = {kvs.IndexerKv(layer, seg.slot), kvs.IndexerGate(layer, seg.slot), w.indexer->compressor.ratio, id,
              w.indexer->compressor.coff};
  }
  std::vector<const float*> rows;
  for (int64_t t = seg.first_row; t < seg.first_row + seg.num_tokens; ++t) {
    const int64_t pos = pr.positions[static_cast<size_t>(t)];
    std::copy(pr.kv.begin() + t * hd, pr.kv.begin() + (t + 1) * hd, ring + (pos % window) * hd);
    rows.clear();
    for (int64_t p = std::max<int64_t>(seg.window_floor, pos - window + 1); p <= pos; ++p)
      rows.push_back(ring + (p % window) * hd);
    if (w.compressor) {
      const int64_t ratio = w.compressor->ratio;
      const int64_t width = w.compressor->coff * hd;
      const int64_t k = (pos + 1) / ratio - 1;  // the entry this token completes, if any
      const bool completes = (pos + 1) % ratio == 0;
      CompressorAppend(*w.compressor, crings, ctx.rope, eps, pos, pr.ckv.data() + t * width,
                       pr.cgate.data() + t * width, completes ? kvs.Entry(layer, seg.blocks, k) : nullptr,
                       ctx.kv_fp8_rope_dim);
      if (w.indexer)
        CompressorAppend(w.indexer->compressor, irings, ctx.rope, eps, pos, pr.ikv.data() + t * 2 * id,
                         pr.igate.data() + t * 2 * id, completes ? kvs.IndexKey(layer, seg.blocks, k) : nullptr);
      AddCompressedRows(
          ctx, w, pr, t, (pos + 1) / ratio, [&](int64_t e) { return kvs.Entry(layer, seg.blocks, e); },
          [&](int64_t e) { return kvs.IndexKey(layer, seg.blocks, e); }, &rows);
    }
    AttendToken(ctx, w, pr, t, rows, o + t * h_n * hd);
    // At a block boundary the slot's state is what a request sharing this prefix starts from.
    if ((pos + 1) % block == 0) {
      const int64_t i = (pos + 1) / block - first_boundary;
      if (i >= 0 && i < static_cast<int64_t>(seg.snapshots.size()) && seg.snapshots[static_cast<size_t>(i)] >= 0)
        kvs.WriteSnapshot(layer, seg.slot, seg.snapshots[static_cast<size_t>(i)], pos + 1);
    }
  }
}

// A draft tree (Segment::parents): each node reads the committed state below the root's
// position and its own path inside the tree, and stages what it would write. A node that
// completes a compressor block pools it on a copy of the committed rings with its path
// replayed into them, exactly as the plain walk would have them along that path.
void AttendTree(const AttentionContext& ctx, const AttentionWeights& w, int64_t layer, const Segment& seg,
                const Projected& pr, float* o) {
  const ModelConfig& c = ctx.config;
  const int64_t h_n = pr.num_heads, hd = c.head_dim, id = c.index_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t window = c.sliding_window;
  const int64_t n = seg.num_tokens, first = seg.first_position;
  CpuKvStore& kvs = *seg.kv;
  const float* ring = kvs.Window(layer, seg.slot);
  CpuKvStore::StagedLayer& st = kvs.Staged(seg.slot).layers[static_cast<size_t>(layer)];
  const int64_t cw = w.compressor ? w.compressor->coff * hd : 0;
  st.kv.assign(static_cast<size_t>(n * hd), 0.0f);
  st.ckv.assign(static_cast<size_t>(n * cw), 0.0f);
  st.cgate.assign(st.ckv.size(), 0.0f);
  st.ikv.assign(static_cast<size_t>(w.indexer ? n * 2 * id : 0), 0.0f);
  st.igate.assign(st.ikv.size(), 0.0f);
  st.entry.assign(static_cast<size_t>(w.compressor ? n * hd : 0), 0.0f);
  st.key.assign(static_cast<size_t>(w.indexer ? n * id : 0), 0.0f);
  std::vector<const float*> rows;
  std::vector<int32_t> path;  // root .. node
  std::vector<float> ring_kv, ring_gate, iring_kv, iring_gate, scratch_entry(static_cast<size_t>(hd + id));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = seg.first_row + i;
    const int64_t pos = pr.positions[static_cast<size_t>(t)];
    path.clear();
    for (int32_t j = static_cast<int32_t>(i); j >= 0; j = seg.parents[static_cast<size_t>(j)]) path.push_back(j);
    std::reverse(path.begin(), path.end());
    std::copy_n(pr.kv.data() + t * hd, hd, st.kv.data() + i * hd);
    if (w.compressor) {
      std::copy_n(pr.ckv.data() + t * cw, cw, st.ckv.data() + i * cw);
      std::copy_n(pr.cgate.data() + t * cw, cw, st.cgate.data() + i * cw);
    }
    if (w.indexer) {
      std::copy_n(pr.ikv.data() + t * 2 * id, 2 * id, st.ikv.data() + i * 2 * id);
      std::copy_n(pr.igate.data() + t * 2 * id, 2 * id, st.igate.data() + i * 2 * id);
    }
    rows.clear();
    for (int64_t p = std::max<int64_t>(seg.window_floor, pos - window + 1); p <= pos; ++p)
      rows.push_back(p < first ? ring + (p % window) * hd : st.kv.data() + path[static_cast<size_t>(p - first)] * hd);
    if (w.compressor) {
      const int64_t ratio = w.compressor->ratio;
      if ((pos + 1) % ratio == 0) {
        // Replay the path into copies of the committed rings; the node's append pools its block.
        const CompressorWeights& cwts = *w.compressor;
        const int64_t ring_floats = kvs.geometry().RingFloats(ratio, cwts.coff, hd);
        ring_kv.assign(kvs.CompressorKv(layer, seg.slot), kvs.CompressorKv(layer, seg.slot) + ring_floats);
        ring_gate.assign(kvs.CompressorGate(layer, seg.slot), kvs.CompressorGate(layer, seg.slot) + ring_floats);
        const CompressorRings cr{ring_kv.data(), ring_gate.data(), ratio, hd, cwts.coff};
        CompressorRings ir;
        if (w.indexer) {
          const int64_t ir_floats = kvs.geometry().RingFloats(ratio, 2, id);
          iring_kv.assign(kvs.IndexerKv(layer, seg.slot), kvs.IndexerKv(layer, seg.slot) + ir_floats);
          iring_gate.assign(kvs.IndexerGate(layer, seg.slot), kvs.IndexerGate(layer, seg.slot) + ir_floats);
          ir = {iring_kv.data(), iring_gate.data(), ratio, id, w.indexer->compressor.coff};
        }
        for (size_t k = 0; k < path.size(); ++k) {
          const int32_t j = path[k];
          const bool self = j == i;
          const int64_t pj = first + static_cast<int64_t>(k);
          CompressorAppend(cwts, cr, ctx.rope, eps, pj, st.ckv.data() + j * cw, st.cgate.data() + j * cw,
                           self ? st.entry.data() + i * hd : scratch_entry.data(), ctx.kv_fp8_rope_dim);
          if (w.indexer)
            CompressorAppend(w.indexer->compressor, ir, ctx.rope, eps, pj, st.ikv.data() + j * 2 * id,
                             st.igate.data() + j * 2 * id, self ? st.key.data() + i * id : scratch_entry.data() + hd);
        }
      }
      // Entries before the root's are committed; later ones were completed on the path.
      const int64_t committed = first / ratio;
      auto on_path = [&](int64_t e) { return path[static_cast<size_t>((e + 1) * ratio - 1 - first)]; };
      AddCompressedRows(
          ctx, w, pr, t, (pos + 1) / ratio,
          [&](int64_t e) -> const float* {
            return e < committed ? kvs.Entry(layer, seg.blocks, e) : st.entry.data() + on_path(e) * hd;
          },
          [&](int64_t e) -> const float* {
            return e < committed ? kvs.IndexKey(layer, seg.blocks, e) : st.key.data() + on_path(e) * id;
          },
          &rows);
    }
    AttendToken(ctx, w, pr, t, rows, o + t * h_n * hd);
  }
}

}  // namespace

void Attention(const AttentionContext& ctx, const AttentionWeights& w, int64_t layer, std::span<const Segment> segments,
               const float* x, int64_t num_rows, float* out) {
  const ModelConfig& c = ctx.config;
  const int64_t t_n = num_rows;
  const int64_t h_n = w.sink.view.shape[0];  // this rank's heads
  const int64_t hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);

  Projected pr;
  pr.num_heads = h_n;
  std::vector<float> qr = Project(ctx.pool, x, w.wq_a, t_n);  // [T, q_lora]
  cpu::RmsNorm(qr.data(), w.q_norm.f32(), qr.data(), t_n, c.q_lora_rank, eps);
  pr.q = Project(ctx.pool, qr.data(), w.wq_b, t_n);  // [T, H*Dh]
  cpu::RmsNorm(pr.q.data(), nullptr, pr.q.data(), t_n * h_n, hd, eps);
  pr.kv = Project(ctx.pool, x, w.wkv, t_n);  // [T, Dh]
  cpu::RmsNorm(pr.kv.data(), w.kv_norm.f32(), pr.kv.data(), t_n, hd, eps);
  pr.positions.assign(static_cast<size_t>(t_n), 0);
  for (const Segment& seg : segments) {
    for (int64_t i = 0; i < seg.num_tokens; ++i) {
      int64_t depth = i;
      if (!seg.parents.empty()) {
        depth = 0;
        for (int32_t j = seg.parents[static_cast<size_t>(i)]; j >= 0; j = seg.parents[static_cast<size_t>(j)]) ++depth;
      }
      pr.positions[static_cast<size_t>(seg.first_row + i)] = seg.first_position + depth;
    }
  }
  for (int64_t t = 0; t < t_n; ++t) {
    RopeRows(ctx.rope, pr.positions[static_cast<size_t>(t)], pr.q.data() + t * h_n * hd, h_n, hd, false);
    RopeRows(ctx.rope, pr.positions[static_cast<size_t>(t)], pr.kv.data() + t * hd, 1, hd, false);
    // An FP8 cache stores the row so: every reader (the window, a draft tree's staging) sees that.
    if (ctx.kv_fp8_rope_dim > 0)
      RoundTripKvRow(std::span<float>(pr.kv.data() + t * hd, static_cast<size_t>(hd)), ctx.kv_fp8_rope_dim);
  }
  if (w.compressor) {
    pr.ckv = Project(ctx.pool, x, w.compressor->wkv, t_n);      // [T, coff*Dh]
    pr.cgate = Project(ctx.pool, x, w.compressor->wgate, t_n);  // [T, coff*Dh]
  }
  const int64_t ih_n = c.index_n_heads;
  const int64_t id = c.index_head_dim;
  if (w.indexer) {
    pr.ikv = Project(ctx.pool, x, w.indexer->compressor.wkv, t_n);      // [T, 2*Id]
    pr.igate = Project(ctx.pool, x, w.indexer->compressor.wgate, t_n);  // [T, 2*Id]
    pr.iq = Project(ctx.pool, qr.data(), w.indexer->wq_b, t_n);         // [T, IH*Id]
    pr.iw = Project(ctx.pool, x, w.indexer->weights_proj, t_n);         // [T, IH]
    const float weight_scale = 1.0f / std::sqrt(static_cast<float>(ih_n));
    for (float& v : pr.iw) v *= weight_scale;
    for (int64_t t = 0; t < t_n; ++t)
      RopeRows(ctx.rope, pr.positions[static_cast<size_t>(t)], pr.iq.data() + t * ih_n * id, ih_n, id, false);
  }

  std::vector<float> o(static_cast<size_t>(t_n * h_n * hd));
  for (const Segment& seg : segments) {
    if (seg.parents.empty()) AttendRun(ctx, w, layer, seg, pr, o.data());
    else AttendTree(ctx, w, layer, seg, pr, o.data());
  }

  // Grouped low-rank output: each group of H/G heads projects to o_lora, then wo_b mixes
  // (this rank's groups: its part of the sum over all of them).
  const int64_t rank = c.o_lora_rank;
  const int64_t groups = w.wo_a.view.shape[0] / rank;
  const int64_t group_in = w.wo_a.view.shape[1];  // h_n * hd / groups
  std::vector<float> group_x(static_cast<size_t>(t_n * group_in));
  std::vector<float> group_y(static_cast<size_t>(t_n * rank));
  std::vector<float> mid(static_cast<size_t>(t_n * groups * rank));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < t_n; ++t)
      std::copy_n(o.data() + t * h_n * hd + g * group_in, group_in, group_x.data() + t * group_in);
    cpu::Linear(ctx.pool, group_x.data(), w.wo_a.f32() + g * rank * group_in, group_y.data(), t_n, group_in, rank);
    for (int64_t t = 0; t < t_n; ++t)
      std::copy_n(group_y.data() + t * rank, rank, mid.data() + (t * groups + g) * rank);
  }
  cpu::Linear(ctx.pool, mid.data(), w.wo_b.f32(), out, t_n, groups * rank, c.hidden_size);
}

}  // namespace peregrine::deepseek_v4
