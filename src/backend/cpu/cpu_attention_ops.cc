#include "backend/cpu/cpu_attention_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace peregrine::cpu {

void RopeAtPositions(float* x, int64_t rows, int64_t n, int64_t rope_dim, const int32_t* positions,
                     int64_t rows_per_position, const float* cos, const float* sin, int64_t num_positions,
                     bool inverse) {
  const int64_t half = rope_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = positions[r / rows_per_position];
    if (pos < 0 || pos >= num_positions) continue;
    ApplyRope(x + r * n, 1, n, rope_dim, cos + pos * half, sin + pos * half, inverse);
  }
}

void CompressorStep(const CompressorStepInputs& in) {
  const int64_t d = in.dim;
  const int64_t r = in.ratio;
  const int64_t width = in.coff * d;
  const int64_t rows_per_slot = in.coff * r;
  const bool overlap = in.coff == 2;
  std::vector<float> entry(static_cast<size_t>(d));
  for (int64_t b = 0; b < in.batch; ++b) {
    const int64_t pos = in.positions[b];
    const int64_t slot = in.state_slots[b];
    if (pos < 0 || slot < 0 || slot >= in.num_state_slots) continue;
    const int64_t block = pos / r;
    const int64_t half = overlap ? block % 2 : 0;
    float* kv_state = in.kv_state + slot * rows_per_slot * width;
    float* gate_state = in.gate_state + slot * rows_per_slot * width;
    float* kv_row = kv_state + (half * r + pos % r) * width;
    float* gate_row = gate_state + (half * r + pos % r) * width;
    const float* ape = in.ape + (pos % r) * width;
    for (int64_t i = 0; i < width; ++i) {
      kv_row[i] = in.kv[b * width + i];
      gate_row[i] = in.gate[b * width + i] + ape[i];
    }
    if ((pos + 1) % r != 0) continue;

    // Current block's slots (second-half channels when overlapping), then the previous
    // block's first-half channels, in the order the model pools them.
    const bool has_previous = overlap && block >= 1;
    const float* cur_kv = kv_state + half * r * width + (overlap ? d : 0);
    const float* cur_gate = gate_state + half * r * width + (overlap ? d : 0);
    const float* prev_kv = kv_state + (1 - half) * r * width;
    const float* prev_gate = gate_state + (1 - half) * r * width;
    for (int64_t c = 0; c < d; ++c) {
      float max_gate = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < r; ++t) max_gate = std::fmax(max_gate, cur_gate[t * width + c]);
      if (has_previous)
        for (int64_t t = 0; t < r; ++t) max_gate = std::fmax(max_gate, prev_gate[t * width + c]);
      float denom = 0.0f;
      float acc = 0.0f;
      for (int64_t t = 0; t < r; ++t) {
        const float e = std::exp(cur_gate[t * width + c] - max_gate);
        denom += e;
        acc += e * cur_kv[t * width + c];
      }
      if (has_previous) {
        for (int64_t t = 0; t < r; ++t) {
          const float e = std::exp(prev_gate[t * width + c] - max_gate);
          denom += e;
          acc += e * prev_kv[t * width + c];
        }
      }
      entry[static_cast<size_t>(c)] = acc / denom;
    }
    RmsNorm(entry.data(), in.norm_weight, entry.data(), 1, d, in.eps);
    const int64_t rope_position = pos + 1 - r;
    if (rope_position >= in.num_positions) continue;
    ApplyRope(entry.data(), 1, d, in.rope_dim, in.rope_cos + rope_position * (in.rope_dim / 2),
              in.rope_sin + rope_position * (in.rope_dim / 2), /*inverse=*/false);
    const int64_t k = (pos + 1) / r - 1;
    if (k / in.page_size >= in.max_pages) continue;
    const int64_t page = in.page_table[b * in.max_pages + k / in.page_size];
    const int64_t row = page * in.page_size + k % in.page_size;
    if (page < 0 || row >= in.num_cache_rows) continue;
    std::copy(entry.begin(), entry.end(), in.cache + row * d);
  }
}

void IndexerScores(ThreadPool& pool, const IndexerScoresInputs& in, float* scores, int64_t score_stride) {
  const int64_t limit = std::min(in.max_pages * in.page_size, score_stride);
  pool.ParallelFor(in.batch, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      const int64_t n = std::clamp<int64_t>(in.num_entries[b], 0, limit);
      const float* q = in.q + b * in.heads * in.dim;
      const float* w = in.weights + b * in.heads;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t page = in.page_table[b * in.max_pages + k / in.page_size];
        const float* key = in.keys + (page * in.page_size + k % in.page_size) * in.dim;
        float acc = 0.0f;
        for (int64_t h = 0; h < in.heads; ++h)
          acc += w[h] * (std::fmax(Dot(q + h * in.dim, key, in.dim), 0.0f) * in.scale);
        scores[b * score_stride + k] = acc;
      }
    }
  });
}

void IndexerTopK(const float* scores, const int32_t* num_entries, int64_t batch, int64_t score_stride, int64_t k,
                 int32_t* indices, int32_t* counts) {
  std::vector<int32_t> order;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = std::clamp<int64_t>(num_entries[b], 0, score_stride);
    const float* s = scores + b * score_stride;
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const int64_t keep = std::min(k, n);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t x, int32_t y) {
      return s[x] != s[y] ? s[x] > s[y] : x < y;
    });
    std::sort(order.begin(), order.begin() + keep);
    for (int64_t j = 0; j < k; ++j) indices[b * k + j] = j < keep ? order[static_cast<size_t>(j)] : -1;
    counts[b] = static_cast<int32_t>(keep);
  }
}

void SparseAttentionDecode(ThreadPool& pool, const SparseAttentionInputs& in, float* out) {
  const int64_t d = in.dim;
  pool.ParallelFor(in.batch, [&](int64_t b_begin, int64_t b_end) {
    std::vector<const float*> rows;
    std::vector<float> logits;
    for (int64_t b = b_begin; b < b_end; ++b) {
      rows.clear();
      const int64_t wl = std::clamp<int64_t>(in.window_lengths[b], 0, in.window_capacity);
      for (int64_t r = 0; r < wl; ++r) {
        const int64_t idx = in.window_indices[b * in.window_capacity + r];
        if (idx >= 0 && idx < in.num_window_rows) rows.push_back(in.window_kv + idx * d);
      }
      if (in.compressed_kv != nullptr) {
        const int64_t cap = in.compressed_indices != nullptr ? in.compressed_capacity : in.max_pages * in.page_size;
        const int64_t cl = std::clamp<int64_t>(in.compressed_lengths[b], 0, cap);
        for (int64_t c = 0; c < cl; ++c) {
          const int64_t e = in.compressed_indices != nullptr ? in.compressed_indices[b * in.compressed_capacity + c] : c;
          if (e < 0 || e / in.page_size >= in.max_pages) continue;
          const int64_t page = in.page_table[b * in.max_pages + e / in.page_size];
          const int64_t row = page * in.page_size + e % in.page_size;
          if (page >= 0 && row < in.num_compressed_rows) rows.push_back(in.compressed_kv + row * d);
        }
      }
      logits.resize(rows.size());
      for (int64_t h = 0; h < in.heads; ++h) {
        const float* q = in.q + (b * in.heads + h) * d;
        float* o = out + (b * in.heads + h) * d;
        const float sink = in.sink[h];
        float mx = sink;
        for (size_t j = 0; j < rows.size(); ++j) {
          logits[j] = Dot(q, rows[j], d) * in.scale;
          mx = std::fmax(mx, logits[j]);
        }
        float denom = std::exp(sink - mx);
        for (size_t j = 0; j < rows.size(); ++j) denom += (logits[j] = std::exp(logits[j] - mx));
        std::fill(o, o + d, 0.0f);
        for (size_t j = 0; j < rows.size(); ++j) {
          const float p = logits[j] / denom;
          for (int64_t e = 0; e < d; ++e) o[e] += p * rows[j][e];
        }
      }
      if (in.rope_cos != nullptr) {
        RopeAtPositions(out + b * in.heads * d, in.heads, d, in.rope_dim, in.positions + b, in.heads, in.rope_cos,
                        in.rope_sin, in.num_positions, /*inverse=*/true);
      }
    }
  });
}

void GroupedOutputProjection(ThreadPool& pool, const float* o, const float* wo_a, const float* wo_b, int64_t batch,
                             int64_t heads, int64_t dim, int64_t groups, int64_t rank, int64_t hidden, float* out) {
  const int64_t group_in = heads * dim / groups;
  std::vector<float> group_x(static_cast<size_t>(batch * group_in));
  std::vector<float> group_y(static_cast<size_t>(batch * rank));
  std::vector<float> mid(static_cast<size_t>(batch * groups * rank));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(o + b * heads * dim + g * group_in, group_in, group_x.data() + b * group_in);
    Linear(pool, group_x.data(), wo_a + g * rank * group_in, group_y.data(), batch, group_in, rank);
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(group_y.data() + b * rank, rank, mid.data() + (b * groups + g) * rank);
  }
  Linear(pool, mid.data(), wo_b, out, batch, groups * rank, hidden);
}

}  // namespace peregrine::cpu
