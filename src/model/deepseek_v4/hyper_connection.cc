#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/deepseek_v4/layers.h"

namespace peregrine::deepseek_v4 {

namespace {

// mixes[m] = rms_normalised(flat) . fn[m]              flat [hc*D], fn [M, hc*D]
void PrenormMixes(const float* flat, int64_t n, const float* fn, int64_t num_mixes, float eps, float* mixes) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(flat[i]) * flat[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t m = 0; m < num_mixes; ++m) mixes[m] = cpu::Dot(flat, fn + m * n, n) * scale;
}

}  // namespace

void HyperConnectionPre(const ModelConfig& c, const HyperConnectionWeights& w, const float* streams,
                        int64_t num_tokens, float* x, float* post, float* comb) {
  const int64_t hc = c.hc_mult;
  const int64_t d = c.hidden_size;
  const int64_t num_mixes = (2 + hc) * hc;
  const float eps = static_cast<float>(c.hc_eps);
  const float* base = w.base.f32();
  const float* scale = w.scale.f32();
  std::vector<float> mixes(static_cast<size_t>(num_mixes));
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* s = streams + t * hc * d;
    PrenormMixes(s, hc * d, w.fn.f32(), num_mixes, static_cast<float>(c.rms_norm_eps), mixes.data());
    float* pt = post + t * hc;
    float* ct = comb + t * hc * hc;
    for (int64_t i = 0; i < hc; ++i) {
      pre[static_cast<size_t>(i)] = cpu::Sigmoid(mixes[static_cast<size_t>(i)] * scale[0] + base[i]) + eps;
      pt[i] = 2.0f * cpu::Sigmoid(mixes[static_cast<size_t>(hc + i)] * scale[1] + base[hc + i]);
    }
    // Row softmax + eps, a column normalisation, then (iters - 1) row/column rounds.
    for (int64_t i = 0; i < hc; ++i) {
      float* row = ct + i * hc;
      float mx = -INFINITY;
      for (int64_t j = 0; j < hc; ++j) {
        row[j] = mixes[static_cast<size_t>(2 * hc + i * hc + j)] * scale[2] + base[2 * hc + i * hc + j];
        mx = std::fmax(mx, row[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += (row[j] = std::exp(row[j] - mx));
      for (int64_t j = 0; j < hc; ++j) row[j] = row[j] / sum + eps;
    }
    auto normalise_columns = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < hc; ++i) sum += ct[i * hc + j];
        for (int64_t i = 0; i < hc; ++i) ct[i * hc + j] /= sum + eps;
      }
    };
    auto normalise_rows = [&] {
      for (int64_t i = 0; i < hc; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += ct[i * hc + j];
        for (int64_t j = 0; j < hc; ++j) ct[i * hc + j] /= sum + eps;
      }
    };
    normalise_columns();
    for (int64_t it = 1; it < c.hc_sinkhorn_iters; ++it) {
      normalise_rows();
      normalise_columns();
    }
    float* xt = x + t * d;
    for (int64_t k = 0; k < d; ++k) {
      float acc = 0.0f;
      for (int64_t i = 0; i < hc; ++i) acc += pre[static_cast<size_t>(i)] * s[i * d + k];
      xt[k] = acc;
    }
  }
}

void HyperConnectionPost(const ModelConfig& c, float* streams, const float* f, const float* post,
                         const float* comb, int64_t num_tokens) {
  const int64_t hc = c.hc_mult;
  const int64_t d = c.hidden_size;
  std::vector<float> old(static_cast<size_t>(hc * d));
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* s = streams + t * hc * d;
    old.assign(s, s + hc * d);
    const float* pt = post + t * hc;
    const float* ct = comb + t * hc * hc;
    const float* ft = f + t * d;
    for (int64_t k = 0; k < hc; ++k)
      for (int64_t e = 0; e < d; ++e) {
        float acc = pt[k] * ft[e];
        for (int64_t j = 0; j < hc; ++j) acc += ct[j * hc + k] * old[static_cast<size_t>(j * d + e)];
        s[k * d + e] = acc;
      }
  }
}

void HyperConnectionHead(const ModelConfig& c, const HyperConnectionWeights& w, const float* streams,
                         int64_t num_tokens, float* y) {
  const int64_t hc = c.hc_mult;
  const int64_t d = c.hidden_size;
  std::vector<float> mixes(static_cast<size_t>(hc));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* s = streams + t * hc * d;
    PrenormMixes(s, hc * d, w.fn.f32(), hc, static_cast<float>(c.rms_norm_eps), mixes.data());
    for (int64_t i = 0; i < hc; ++i)
      mixes[static_cast<size_t>(i)] =
          cpu::Sigmoid(mixes[static_cast<size_t>(i)] * w.scale.f32()[0] + w.base.f32()[i]) +
          static_cast<float>(c.hc_eps);
    for (int64_t k = 0; k < d; ++k) {
      float acc = 0.0f;
      for (int64_t i = 0; i < hc; ++i) acc += mixes[static_cast<size_t>(i)] * s[i * d + k];
      y[t * d + k] = acc;
    }
  }
}

void StreamMean(const ModelConfig& c, const float* streams, int64_t num_tokens, float* out, int64_t out_stride) {
  const int64_t hc = c.hc_mult;
  const int64_t d = c.hidden_size;
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* dst = out + t * out_stride;
    std::fill_n(dst, d, 0.0f);
    for (int64_t j = 0; j < hc; ++j) {
      const float* src = streams + (t * hc + j) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] += src[x];
    }
    for (int64_t x = 0; x < d; ++x) dst[x] /= static_cast<float>(hc);
  }
}

}  // namespace peregrine::deepseek_v4
