#include "model/deepseek_v4/compressor.h"

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "base/check.h"
#include "model/deepseek_v4/kv_fp8.h"

namespace peregrine::deepseek_v4 {

bool CompressorAppend(const CompressorWeights& w, const CompressorRings& s, const RopeTable& rope, float eps,
                      int64_t position, const float* kv, const float* gate, float* entry, int64_t fp8_rope_dim) {
  const int64_t r = s.ratio;
  const int64_t d = s.dim;
  const int64_t width = s.coff * d;
  const bool overlap = s.coff == 2;
  const int64_t block = position / r;
  const int64_t half = overlap ? (block & 1) : 0;
  const float* ape = w.ape.f32() + (position % r) * width;
  float* kv_row = s.kv + (half * r + position % r) * width;
  float* gate_row = s.gate + (half * r + position % r) * width;
  for (int64_t i = 0; i < width; ++i) {
    kv_row[i] = kv[i];
    gate_row[i] = gate[i] + ape[i];
  }
  if ((position + 1) % r != 0) return false;
  PG_CHECK(entry != nullptr, "a block completed with nowhere to write its entry");

  // Slots of the pooled entry: this block's second halves (its rows, without overlap), then
  // with overlap the previous block's first halves (none before block 1).
  const bool has_previous = overlap && block >= 1;
  const float* cur_kv = s.kv + half * r * width + (overlap ? d : 0);
  const float* cur_gate = s.gate + half * r * width + (overlap ? d : 0);
  const float* prev_kv = s.kv + (half ^ 1) * r * width;
  const float* prev_gate = s.gate + (half ^ 1) * r * width;
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
    entry[c] = acc / denom;
  }
  cpu::RmsNorm(entry, w.norm.f32(), entry, 1, d, eps);
  std::vector<float> cos(static_cast<size_t>(rope.rope_dim() / 2)), sin(cos.size());
  rope.Angles(position + 1 - r, cos.data(), sin.data());
  cpu::ApplyRope(entry, 1, d, rope.rope_dim(), cos.data(), sin.data(), /*inverse=*/false);
  if (fp8_rope_dim > 0) RoundTripKvRow(std::span<float>(entry, static_cast<size_t>(d)), fp8_rope_dim);
  return true;
}

}  // namespace peregrine::deepseek_v4
