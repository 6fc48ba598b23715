#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/deepseek_v4/compressor.h"
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

}  // namespace

void Attention(const AttentionContext& ctx, const AttentionWeights& w, int64_t layer, std::span<const Segment> segments,
               const float* x, int64_t num_rows, float* out) {
  const ModelConfig& c = ctx.config;
  const int64_t t_n = num_rows;
  const int64_t h_n = c.num_heads;
  const int64_t hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);

  std::vector<float> qr = Project(ctx.pool, x, w.wq_a, t_n);  // [T, q_lora]
  cpu::RmsNorm(qr.data(), w.q_norm.f32(), qr.data(), t_n, c.q_lora_rank, eps);
  std::vector<float> q = Project(ctx.pool, qr.data(), w.wq_b, t_n);  // [T, H*Dh]
  cpu::RmsNorm(q.data(), nullptr, q.data(), t_n * h_n, hd, eps);
  std::vector<float> kv = Project(ctx.pool, x, w.wkv, t_n);  // [T, Dh]
  cpu::RmsNorm(kv.data(), w.kv_norm.f32(), kv.data(), t_n, hd, eps);
  std::vector<int64_t> positions(static_cast<size_t>(t_n));  // [N]
  for (const Segment& seg : segments)
    for (int64_t i = 0; i < seg.num_tokens; ++i) positions[static_cast<size_t>(seg.first_row + i)] = seg.first_position + i;
  for (int64_t t = 0; t < t_n; ++t) {
    RopeRows(ctx.rope, positions[static_cast<size_t>(t)], q.data() + t * h_n * hd, h_n, hd, false);
    RopeRows(ctx.rope, positions[static_cast<size_t>(t)], kv.data() + t * hd, 1, hd, false);
  }

  std::vector<float> ckv, cgate, ikv, igate, iq, iw;
  if (w.compressor) {
    ckv = Project(ctx.pool, x, w.compressor->wkv, t_n);      // [T, coff*Dh]
    cgate = Project(ctx.pool, x, w.compressor->wgate, t_n);  // [T, coff*Dh]
  }
  const int64_t ih_n = c.index_n_heads;
  const int64_t id = c.index_head_dim;
  if (w.indexer) {
    ikv = Project(ctx.pool, x, w.indexer->compressor.wkv, t_n);      // [T, 2*Id]
    igate = Project(ctx.pool, x, w.indexer->compressor.wgate, t_n);  // [T, 2*Id]
    iq = Project(ctx.pool, qr.data(), w.indexer->wq_b, t_n);         // [T, IH*Id]
    iw = Project(ctx.pool, x, w.indexer->weights_proj, t_n);         // [T, IH]
    const float weight_scale = 1.0f / std::sqrt(static_cast<float>(ih_n));
    for (float& v : iw) v *= weight_scale;
    for (int64_t t = 0; t < t_n; ++t)
      RopeRows(ctx.rope, positions[static_cast<size_t>(t)], iq.data() + t * ih_n * id, ih_n, id, false);
  }

  // Token by token: extend the window and the compressors, then attend. Entry k of a
  // compressor is visible from position p iff k < (p + 1) / ratio, which is exactly the
  // number of entries finished once p itself has been appended.
  const int64_t window = c.sliding_window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> o(static_cast<size_t>(t_n * h_n * hd));
  std::vector<const float*> rows;
  std::vector<const float*> keys;
  for (const Segment& seg : segments) {
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
    for (int64_t t = seg.first_row; t < seg.first_row + seg.num_tokens; ++t) {
      const int64_t pos = positions[static_cast<size_t>(t)];
      std::copy(kv.begin() + t * hd, kv.begin() + (t + 1) * hd, ring + (pos % window) * hd);
      rows.clear();
      for (int64_t p = std::max<int64_t>(0, pos - window + 1); p <= pos; ++p) rows.push_back(ring + (p % window) * hd);
      if (w.compressor) {
        const int64_t ratio = w.compressor->ratio;
        const int64_t width = w.compressor->coff * hd;
        const int64_t k = (pos + 1) / ratio - 1;  // the entry this token completes, if any
        const bool completes = (pos + 1) % ratio == 0;
        CompressorAppend(*w.compressor, crings, ctx.rope, eps, pos, ckv.data() + t * width, cgate.data() + t * width,
                         completes ? kvs.Entry(layer, seg.blocks, k) : nullptr);
        const int64_t visible = (pos + 1) / ratio;
        if (w.indexer) {
          CompressorAppend(w.indexer->compressor, irings, ctx.rope, eps, pos, ikv.data() + t * 2 * id,
                           igate.data() + t * 2 * id, completes ? kvs.IndexKey(layer, seg.blocks, k) : nullptr);
          keys.clear();
          for (int64_t e = 0; e < visible; ++e) keys.push_back(kvs.IndexKey(layer, seg.blocks, e));
          for (int64_t e : IndexerTopK(iq.data() + t * ih_n * id, iw.data() + t * ih_n, keys, ih_n, id, c.index_topk))
            rows.push_back(kvs.Entry(layer, seg.blocks, e));
        } else {
          for (int64_t e = 0; e < visible; ++e) rows.push_back(kvs.Entry(layer, seg.blocks, e));
        }
      }
      for (int64_t h = 0; h < h_n; ++h) {
        float* oh = o.data() + (t * h_n + h) * hd;
        SinkAttentionHead(q.data() + (t * h_n + h) * hd, rows, hd, scale, w.sink.f32()[h], oh);
      }
      // K = V carries the rotation on its trailing dims; undo it at the query's position.
      RopeRows(ctx.rope, pos, o.data() + t * h_n * hd, h_n, hd, /*inverse=*/true);
      // At a block boundary the slot's state is what a request sharing this prefix starts from.
      if ((pos + 1) % block == 0) {
        const int64_t i = (pos + 1) / block - first_boundary;
        if (i >= 0 && i < static_cast<int64_t>(seg.snapshots.size()) && seg.snapshots[static_cast<size_t>(i)] >= 0)
          kvs.WriteSnapshot(layer, seg.slot, seg.snapshots[static_cast<size_t>(i)], pos + 1);
      }
    }
  }

  // Grouped low-rank output: each group of H/G heads projects to o_lora, then wo_b mixes.
  const int64_t groups = c.o_groups;
  const int64_t group_in = h_n * hd / groups;
  const int64_t rank = c.o_lora_rank;
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
