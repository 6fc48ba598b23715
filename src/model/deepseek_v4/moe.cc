#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/deepseek_v4/layers.h"

namespace peregrine::deepseek_v4 {

namespace {

// SwiGLU expert with V4's clamps (gate <= limit, |up| <= limit) on n gathered rows.
//   x [n, D] -> y [n, D]
void Expert(const ModelConfig& c, cpu::ThreadPool& pool, const ExpertWeights& e, const float* x, int64_t n,
            float* y) {
  const int64_t d = c.hidden_size;
  const int64_t inter = e.w1.view.shape[0];
  std::vector<float> gate(static_cast<size_t>(n * inter)), up(gate.size());
  cpu::Linear(pool, x, e.w1.f32(), gate.data(), n, d, inter);
  cpu::Linear(pool, x, e.w3.f32(), up.data(), n, d, inter);
  const float limit = static_cast<float>(c.swiglu_limit);
  for (size_t i = 0; i < gate.size(); ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = std::fmin(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    gate[i] = cpu::Silu(g) * u;
  }
  cpu::Linear(pool, gate.data(), e.w2.f32(), y, n, inter, d);
}

}  // namespace

void Moe(const ModelConfig& c, cpu::ThreadPool& pool, const MoeWeights& w, MoeType type,
         std::span<const int32_t> token_ids, const float* x, float* out) {
  const int64_t t_n = static_cast<int64_t>(token_ids.size());
  const int64_t d = c.hidden_size;
  const int64_t e_n = c.num_experts;
  const int64_t k_n = c.num_experts_per_tok;

  // Router: sqrt(softplus(logits)); experts from tid2eid (hash) or the top-k of score + bias;
  // weights are the unbiased scores of the chosen experts, normalised, times the scale.
  std::vector<float> scores(static_cast<size_t>(t_n * e_n));
  cpu::Linear(pool, x, w.gate.f32(), scores.data(), t_n, d, e_n);
  for (float& s : scores) s = std::sqrt(cpu::Softplus(s));
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(e_n));  // (token, weight)
  std::vector<int64_t> chosen(static_cast<size_t>(k_n));
  std::vector<int64_t> order(static_cast<size_t>(e_n));
  for (int64_t t = 0; t < t_n; ++t) {
    const float* st = scores.data() + t * e_n;
    if (type == MoeType::kHash) {
      std::copy_n(w.tid2eid.i64() + static_cast<int64_t>(token_ids[static_cast<size_t>(t)]) * k_n, k_n, chosen.begin());
    } else {
      const float* bias = w.bias.f32();
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k_n, order.end(), [&](int64_t a, int64_t b) {
        const float sa = st[a] + bias[a], sb = st[b] + bias[b];
        return sa != sb ? sa > sb : a < b;
      });
      std::copy_n(order.begin(), k_n, chosen.begin());
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < k_n; ++k) sum += st[chosen[static_cast<size_t>(k)]];
    const float norm = static_cast<float>(c.routed_scaling_factor) / (sum + 1e-20f);
    for (int64_t k = 0; k < k_n; ++k) {
      const int64_t e = chosen[static_cast<size_t>(k)];
      by_expert[static_cast<size_t>(e)].emplace_back(t, st[e] * norm);
    }
  }

  std::fill(out, out + t_n * d, 0.0f);
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < e_n; ++e) {
    const auto& hits = by_expert[static_cast<size_t>(e)];
    // Experts another rank holds (expert parallel) add their part there.
    if (hits.empty() || w.experts[static_cast<size_t>(e)].w1.view.data == nullptr) continue;
    const int64_t n = static_cast<int64_t>(hits.size());
    xs.resize(static_cast<size_t>(n * d));
    ys.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + hits[static_cast<size_t>(i)].first * d, d, xs.data() + i * d);
    Expert(c, pool, w.experts[static_cast<size_t>(e)], xs.data(), n, ys.data());
    for (int64_t i = 0; i < n; ++i) {
      float* ot = out + hits[static_cast<size_t>(i)].first * d;
      const float wt = hits[static_cast<size_t>(i)].second;
      for (int64_t j = 0; j < d; ++j) ot[j] += wt * ys[static_cast<size_t>(i * d + j)];
    }
  }
  ys.resize(static_cast<size_t>(t_n * d));
  Expert(c, pool, w.shared, x, t_n, ys.data());
  for (int64_t i = 0; i < t_n * d; ++i) out[i] += ys[static_cast<size_t>(i)];
}

}  // namespace peregrine::deepseek_v4
