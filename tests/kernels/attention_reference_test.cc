// The batched CPU references (backend/cpu/cpu_attention_ops.h) composed into a decode step
// must reproduce the model's per-token attention (model/deepseek_v4/attention.cc) for
// sliding, CSA and HCA layers, token after token across the window and block boundaries,
// with requests at different positions in one batch. This ties the CUDA kernels' oracle to
// the forward that matches HF transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_pool.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/layers.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/kv_store.h"

namespace peregrine::deepseek_v4 {
namespace {

HostTensor RandomTensor(std::mt19937& rng, Shape shape, float stddev, float mean = 0.0f) {
  auto storage = std::make_shared<std::vector<float>>(static_cast<size_t>(shape.numel()));
  std::normal_distribution<float> dist(mean, stddev);
  for (float& v : *storage) v = dist(rng);
  HostTensor t;
  t.view = Tensor::Contiguous(storage->data(), DType::kF32, shape);
  t.storage = storage;
  return t;
}

CompressorWeights RandomCompressor(std::mt19937& rng, int64_t ratio, int64_t dim, int64_t coff, int64_t hidden) {
  CompressorWeights c;
  c.ratio = ratio;
  c.dim = dim;
  c.coff = coff;
  c.wkv = RandomTensor(rng, {coff * dim, hidden}, 0.3f);
  c.wgate = RandomTensor(rng, {coff * dim, hidden}, 0.3f);
  c.ape = RandomTensor(rng, {ratio, coff * dim}, 0.5f);
  c.norm = RandomTensor(rng, {dim}, 0.1f, 1.0f);
  return c;
}

enum class Kind { kSliding, kCsa, kHca };

struct Dims {
  int64_t hidden = 48, heads = 8, head_dim = 32, rope = 8, q_lora = 24, groups = 2, o_lora = 12;
  int64_t window = 8, index_heads = 4, index_dim = 16, index_topk = 5;
};

// Per-request device-like state for the batched path: window ring, compressor rings, caches.
struct BatchedLayer {
  int64_t batch = 0, ratio = 0, page_size = 4, max_pages = 0, index_page_size = 4;
  std::vector<float> window_kv;                 // [B * W, Dh]
  std::vector<float> kv_state, gate_state;      // [B, coff*ratio, coff*Dh]
  std::vector<float> ikv_state, igate_state;    // [B, 8, 2*Id]
  std::vector<float> cache, index_cache;        // [pages * P, Dh], [pages * P, Id]
  std::vector<int32_t> page_table, index_page_table;  // [B, max_pages]
};

class AttentionReferenceTest : public ::testing::TestWithParam<Kind> {};

TEST_P(AttentionReferenceTest, BatchedOpsReproduceTheModel) {
  const Kind kind = GetParam();
  const Dims d;
  const int64_t batch = 3;
  const int64_t offsets[batch] = {0, 5, 11};  // request b starts at step offsets[b]
  const int64_t steps = 48;
  const int64_t ratio = kind == Kind::kCsa ? 4 : (kind == Kind::kHca ? 8 : 0);
  std::mt19937 rng(static_cast<uint32_t>(17 + static_cast<int>(kind)));

  ModelConfig config;
  config.hidden_size = d.hidden;
  config.num_heads = d.heads;
  config.head_dim = d.head_dim;
  config.rope_head_dim = d.rope;
  config.q_lora_rank = d.q_lora;
  config.o_groups = d.groups;
  config.o_lora_rank = d.o_lora;
  config.sliding_window = d.window;
  config.index_n_heads = d.index_heads;
  config.index_head_dim = d.index_dim;
  config.index_topk = d.index_topk;
  config.rms_norm_eps = 1e-6;
  config.num_layers = 1;
  config.layer_types = {kind == Kind::kCsa   ? AttentionType::kCompressedSparse
                        : kind == Kind::kHca ? AttentionType::kHeavilyCompressed
                                             : AttentionType::kSliding};
  config.compress_ratio_csa = 4;
  config.compress_ratio_hca = 8;
  RopeConfig rope_config;
  rope_config.theta = 160000.0;
  rope_config.yarn = true;
  rope_config.factor = 16.0;
  rope_config.original_max_position_embeddings = 32;
  const RopeTable rope(rope_config, d.rope);
  const int64_t num_positions = steps + 8;
  const int64_t half = d.rope / 2;
  std::vector<float> cos(static_cast<size_t>(num_positions * half)), sin(cos.size());
  for (int64_t p = 0; p < num_positions; ++p) rope.Angles(p, cos.data() + p * half, sin.data() + p * half);

  AttentionWeights w;
  w.wq_a = RandomTensor(rng, {d.q_lora, d.hidden}, 0.3f);
  w.q_norm = RandomTensor(rng, {d.q_lora}, 0.1f, 1.0f);
  w.wq_b = RandomTensor(rng, {d.heads * d.head_dim, d.q_lora}, 0.3f);
  w.wkv = RandomTensor(rng, {d.head_dim, d.hidden}, 0.3f);
  w.kv_norm = RandomTensor(rng, {d.head_dim}, 0.1f, 1.0f);
  w.wo_a = RandomTensor(rng, {d.groups * d.o_lora, d.heads * d.head_dim / d.groups}, 0.1f);
  w.wo_b = RandomTensor(rng, {d.hidden, d.groups * d.o_lora}, 0.2f);
  w.sink = RandomTensor(rng, {d.heads}, 1.0f);
  const int64_t coff = kind == Kind::kCsa ? 2 : 1;
  if (kind != Kind::kSliding) w.compressor = RandomCompressor(rng, ratio, d.head_dim, coff, d.hidden);
  if (kind == Kind::kCsa) {
    IndexerWeights iw;
    iw.wq_b = RandomTensor(rng, {d.index_heads * d.index_dim, d.q_lora}, 0.3f);
    iw.weights_proj = RandomTensor(rng, {d.index_heads, d.hidden}, 0.3f);
    iw.compressor = RandomCompressor(rng, 4, d.index_dim, 2, d.hidden);
    w.indexer = std::move(iw);
  }

  cpu::ThreadPool pool(1);
  const AttentionContext ctx{config, rope, pool};
  // The model's state: one slot per request, 16-token blocks.
  const KvGeometry geometry = KvGeometry::For(config, 16, KvElementSizes{});
  const auto blocks_per_request = static_cast<int32_t>(geometry.Layout().BlocksFor(steps) + 1);
  CpuKvStore model_kv(geometry, batch, batch * blocks_per_request, 0);
  std::vector<std::vector<int32_t>> block_tables(batch);
  for (int64_t b = 0; b < batch; ++b)
    for (int32_t j = 0; j < blocks_per_request; ++j)
      block_tables[static_cast<size_t>(b)].push_back(static_cast<int32_t>(b) * blocks_per_request + j);

  // Batched state, pages shuffled.
  BatchedLayer L;
  L.batch = batch;
  L.ratio = ratio;
  L.window_kv.assign(static_cast<size_t>(batch * d.window * d.head_dim), 0.0f);
  const int64_t max_entries = ratio > 0 ? steps / ratio + 1 : 1;
  L.max_pages = (max_entries + L.page_size - 1) / L.page_size;
  const int64_t num_pages = batch * L.max_pages;
  auto shuffled_table = [&]() {
    std::vector<int32_t> t(static_cast<size_t>(num_pages));
    std::iota(t.begin(), t.end(), 0);
    std::shuffle(t.begin(), t.end(), rng);
    return t;
  };
  L.page_table = shuffled_table();
  L.index_page_table = shuffled_table();
  if (ratio > 0) {
    L.kv_state.assign(static_cast<size_t>(batch * coff * ratio * coff * d.head_dim), 0.0f);
    L.gate_state = L.kv_state;
    L.cache.assign(static_cast<size_t>(num_pages * L.page_size * d.head_dim), 0.0f);
  }
  if (kind == Kind::kCsa) {
    L.ikv_state.assign(static_cast<size_t>(batch * 8 * 2 * d.index_dim), 0.0f);
    L.igate_state = L.ikv_state;
    L.index_cache.assign(static_cast<size_t>(num_pages * L.page_size * d.index_dim), 0.0f);
  }

  auto linear = [&](const std::vector<float>& x, const HostTensor& wt, int64_t rows) {
    const int64_t out = wt.view.shape[0], in = wt.view.shape[1];
    std::vector<float> y(static_cast<size_t>(rows * out));
    cpu::Linear(pool, x.data(), wt.f32(), y.data(), rows, in, out);
    return y;
  };
  auto compressor_step = [&](const CompressorWeights& cw, std::vector<float>& kv_state, std::vector<float>& gate_state,
                             std::vector<float>& cache, const std::vector<int32_t>& table,
                             const std::vector<int32_t>& positions, const std::vector<float>& x) {
    const std::vector<float> kv = linear(x, cw.wkv, batch);
    const std::vector<float> gate = linear(x, cw.wgate, batch);
    std::vector<int32_t> slots(static_cast<size_t>(batch));
    std::iota(slots.begin(), slots.end(), 0);
    cpu::CompressorStepInputs in;
    in.kv = kv.data();
    in.gate = gate.data();
    in.ape = cw.ape.f32();
    in.kv_state = kv_state.data();
    in.gate_state = gate_state.data();
    in.state_slots = slots.data();
    in.positions = positions.data();
    in.norm_weight = cw.norm.f32();
    in.rope_cos = cos.data();
    in.rope_sin = sin.data();
    in.cache = cache.data();
    in.page_table = table.data();
    in.batch = batch;
    in.dim = cw.dim;
    in.ratio = cw.ratio;
    in.coff = cw.coff;
    in.rope_dim = d.rope;
    in.num_positions = num_positions;
    in.num_state_slots = batch;
    in.page_size = L.page_size;
    in.max_pages = L.max_pages;
    in.num_cache_rows = num_pages * L.page_size;
    in.eps = 1e-6f;
    cpu::CompressorStep(in);
  };

  double worst = 0.0;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int32_t> positions(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b)
      positions[static_cast<size_t>(b)] = step >= offsets[b] ? static_cast<int32_t>(step - offsets[b]) : -1;
    std::vector<float> x(static_cast<size_t>(batch * d.hidden));
    for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);

    // The model: one segment of one token per active request.
    std::vector<float> want(static_cast<size_t>(batch * d.hidden), 0.0f);
    std::vector<Segment> segments;
    for (int64_t b = 0; b < batch; ++b) {
      if (positions[static_cast<size_t>(b)] < 0) continue;
      segments.push_back({&model_kv, static_cast<int32_t>(b), block_tables[static_cast<size_t>(b)], {},
                          positions[static_cast<size_t>(b)], b, 1});
    }
    Attention(ctx, w, 0, segments, x.data(), batch, want.data());

    // The batched references.
    std::vector<float> qr = linear(x, w.wq_a, batch);
    cpu::RmsNorm(qr.data(), w.q_norm.f32(), qr.data(), batch, d.q_lora, 1e-6f);
    std::vector<float> q = linear(qr, w.wq_b, batch);
    cpu::RmsNorm(q.data(), nullptr, q.data(), batch * d.heads, d.head_dim, 1e-6f);
    std::vector<float> kv = linear(x, w.wkv, batch);
    cpu::RmsNorm(kv.data(), w.kv_norm.f32(), kv.data(), batch, d.head_dim, 1e-6f);
    cpu::RopeAtPositions(q.data(), batch * d.heads, d.head_dim, d.rope, positions.data(), d.heads, cos.data(),
                         sin.data(), num_positions, false);
    cpu::RopeAtPositions(kv.data(), batch, d.head_dim, d.rope, positions.data(), 1, cos.data(), sin.data(),
                         num_positions, false);
    std::vector<int32_t> window_indices(static_cast<size_t>(batch * d.window), -1), window_lengths(batch, 0);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t pos = positions[static_cast<size_t>(b)];
      if (pos < 0) continue;
      std::copy_n(kv.data() + b * d.head_dim, d.head_dim,
                  L.window_kv.data() + (b * d.window + pos % d.window) * d.head_dim);
      const int64_t first = std::max<int64_t>(0, pos - d.window + 1);
      for (int64_t p = first; p <= pos; ++p)
        window_indices[static_cast<size_t>(b * d.window + p - first)] = static_cast<int32_t>(b * d.window + p % d.window);
      window_lengths[static_cast<size_t>(b)] = static_cast<int32_t>(pos - first + 1);
    }
    std::vector<int32_t> compressed_lengths(batch, 0), indices, counts(batch, 0);
    if (w.compressor) {
      compressor_step(*w.compressor, L.kv_state, L.gate_state, L.cache, L.page_table, positions, x);
      for (int64_t b = 0; b < batch; ++b)
        compressed_lengths[static_cast<size_t>(b)] =
            positions[static_cast<size_t>(b)] < 0 ? 0 : (positions[static_cast<size_t>(b)] + 1) / static_cast<int32_t>(ratio);
    }
    if (w.indexer) {
      compressor_step(w.indexer->compressor, L.ikv_state, L.igate_state, L.index_cache, L.index_page_table, positions, x);
      std::vector<float> iq = linear(qr, w.indexer->wq_b, batch);
      cpu::RopeAtPositions(iq.data(), batch * d.index_heads, d.index_dim, d.rope, positions.data(), d.index_heads,
                           cos.data(), sin.data(), num_positions, false);
      std::vector<float> iweights = linear(x, w.indexer->weights_proj, batch);
      for (float& v : iweights) v *= 1.0f / std::sqrt(static_cast<float>(d.index_heads));
      const int64_t stride = L.max_pages * L.page_size;
      std::vector<float> scores(static_cast<size_t>(batch * stride), 0.0f);
      cpu::IndexerScoresInputs si;
      si.q = iq.data();
      si.weights = iweights.data();
      si.keys = L.index_cache.data();
      si.page_table = L.index_page_table.data();
      si.num_entries = compressed_lengths.data();
      si.batch = batch;
      si.heads = d.index_heads;
      si.dim = d.index_dim;
      si.page_size = L.page_size;
      si.max_pages = L.max_pages;
      si.scale = 1.0f / std::sqrt(static_cast<float>(d.index_dim));
      cpu::IndexerScores(pool, si, scores.data(), stride);
      indices.assign(static_cast<size_t>(batch * d.index_topk), 0);
      cpu::IndexerTopK(scores.data(), compressed_lengths.data(), batch, stride, d.index_topk, indices.data(),
                       counts.data());
    }
    cpu::SparseAttentionInputs ai;
    ai.q = q.data();
    ai.window_kv = L.window_kv.data();
    ai.window_indices = window_indices.data();
    ai.window_lengths = window_lengths.data();
    ai.compressed_kv = w.compressor ? L.cache.data() : nullptr;
    ai.page_table = L.page_table.data();
    ai.compressed_indices = w.indexer ? indices.data() : nullptr;
    ai.compressed_lengths = w.indexer ? counts.data() : compressed_lengths.data();
    ai.sink = w.sink.f32();
    ai.positions = positions.data();
    ai.rope_cos = cos.data();
    ai.rope_sin = sin.data();
    ai.batch = batch;
    ai.heads = d.heads;
    ai.dim = d.head_dim;
    ai.num_window_rows = batch * d.window;
    ai.window_capacity = d.window;
    ai.num_compressed_rows = num_pages * L.page_size;
    ai.page_size = L.page_size;
    ai.max_pages = L.max_pages;
    ai.compressed_capacity = d.index_topk;
    ai.rope_dim = d.rope;
    ai.num_positions = num_positions;
    ai.scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));
    std::vector<float> o(static_cast<size_t>(batch * d.heads * d.head_dim));
    cpu::SparseAttentionDecode(pool, ai, o.data());
    std::vector<float> got(static_cast<size_t>(batch * d.hidden));
    cpu::GroupedOutputProjection(pool, o.data(), w.wo_a.f32(), w.wo_b.f32(), batch, d.heads, d.head_dim, d.groups,
                                 d.o_lora, d.hidden, got.data());

    for (int64_t b = 0; b < batch; ++b) {
      if (positions[static_cast<size_t>(b)] < 0) continue;
      for (int64_t i = 0; i < d.hidden; ++i) {
        const float g = got[static_cast<size_t>(b * d.hidden + i)];
        const float e = want[static_cast<size_t>(b * d.hidden + i)];
        const double err = std::fabs(static_cast<double>(g) - e) / (1.0 + std::fabs(e));
        worst = std::max(worst, err);
        ASSERT_LE(err, 2e-5) << "step " << step << " request " << b << " position " << positions[static_cast<size_t>(b)]
                             << " element " << i << ": batched " << g << ", model " << e;
      }
    }
  }
  // Compressed entries agree bit for bit (same arithmetic in the same order).
  if (w.compressor) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t num_entries = (steps - offsets[b]) / ratio;
      for (int64_t k = 0; k < num_entries; ++k) {
        const int64_t row = L.page_table[static_cast<size_t>(b * L.max_pages + k / L.page_size)] * L.page_size +
                            k % L.page_size;
        const float* entry = model_kv.Entry(0, block_tables[static_cast<size_t>(b)], k);
        for (int64_t c = 0; c < d.head_dim; ++c)
          ASSERT_EQ(L.cache[static_cast<size_t>(row * d.head_dim + c)], entry[c])
              << "request " << b << " entry " << k << " channel " << c;
      }
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Layers, AttentionReferenceTest, ::testing::Values(Kind::kSliding, Kind::kCsa, Kind::kHca),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           switch (info.param) {
                             case Kind::kSliding:
                               return std::string("Sliding");
                             case Kind::kCsa:
                               return std::string("Csa");
                             case Kind::kHca:
                               return std::string("Hca");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
}  // namespace peregrine::deepseek_v4
