#include "model/deepseek_v4/compressor.h"

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace peregrine::deepseek_v4 {

bool CompressorAppend(const CompressorWeights& w, CompressorState& s, const RopeTable& rope, float eps,
                      int64_t position, const float* kv, const float* gate) {
  const int64_t width = s.coff * s.dim;
  const float* ape = w.ape.f32() + (position % s.ratio) * width;
  s.pending_kv.insert(s.pending_kv.end(), kv, kv + width);
  for (int64_t i = 0; i < width; ++i) s.pending_gate.push_back(gate[i] + ape[i]);
  if ((position + 1) % s.ratio != 0) return false;
  PG_CHECK(s.num_pending() == s.ratio, "a block completed with missing rows");

  // Slots of the pooled entry: with overlap, the previous block's first halves (if any)
  // then this block's second halves; without, this block's rows.
  const int64_t r = s.ratio;
  const int64_t d = s.dim;
  const bool overlap = s.coff == 2;
  const bool has_previous = overlap && !s.previous_kv.empty();
  std::vector<float> entry(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) {
    float max_gate = -std::numeric_limits<float>::infinity();
    auto current_gate = [&](int64_t t) { return s.pending_gate[static_cast<size_t>(t * width + (overlap ? d : 0) + c)]; };
    auto current_kv = [&](int64_t t) { return s.pending_kv[static_cast<size_t>(t * width + (overlap ? d : 0) + c)]; };
    for (int64_t t = 0; t < r; ++t) max_gate = std::fmax(max_gate, current_gate(t));
    if (has_previous)
      for (int64_t t = 0; t < r; ++t) max_gate = std::fmax(max_gate, s.previous_gate[static_cast<size_t>(t * d + c)]);
    float denom = 0.0f;
    float acc = 0.0f;
    for (int64_t t = 0; t < r; ++t) {
      const float e = std::exp(current_gate(t) - max_gate);
      denom += e;
      acc += e * current_kv(t);
    }
    if (has_previous) {
      for (int64_t t = 0; t < r; ++t) {
        const float e = std::exp(s.previous_gate[static_cast<size_t>(t * d + c)] - max_gate);
        denom += e;
        acc += e * s.previous_kv[static_cast<size_t>(t * d + c)];
      }
    }
    entry[static_cast<size_t>(c)] = acc / denom;
  }
  cpu::RmsNorm(entry.data(), w.norm.f32(), entry.data(), 1, d, eps);
  std::vector<float> cos(static_cast<size_t>(rope.rope_dim() / 2)), sin(cos.size());
  rope.Angles(position + 1 - r, cos.data(), sin.data());
  cpu::ApplyRope(entry.data(), 1, d, rope.rope_dim(), cos.data(), sin.data(), /*inverse=*/false);
  s.entries.insert(s.entries.end(), entry.begin(), entry.end());

  if (overlap) {
    s.previous_kv.resize(static_cast<size_t>(r * d));
    s.previous_gate.resize(static_cast<size_t>(r * d));
    for (int64_t t = 0; t < r; ++t)
      for (int64_t c = 0; c < d; ++c) {
        s.previous_kv[static_cast<size_t>(t * d + c)] = s.pending_kv[static_cast<size_t>(t * width + c)];
        s.previous_gate[static_cast<size_t>(t * d + c)] = s.pending_gate[static_cast<size_t>(t * width + c)];
      }
  }
  s.pending_kv.clear();
  s.pending_gate.clear();
  return true;
}

}  // namespace peregrine::deepseek_v4
