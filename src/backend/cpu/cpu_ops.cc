#include "backend/cpu/cpu_ops.h"

namespace peregrine::cpu {

float Dot(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums let the compiler vectorise without reassociating.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void Linear(ThreadPool& pool, const float* x, const float* w, float* y, int64_t num_tokens,
            int64_t in, int64_t out) {
  // Parallel over output features: each worker streams its slice of the weight once per
  // block of tokens, which is what bounds a decode step.
  constexpr int64_t kTokenBlock = 8;
  pool.ParallelFor(out, [&](int64_t o_begin, int64_t o_end) {
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kTokenBlock) {
      const int64_t t1 = t0 + kTokenBlock < num_tokens ? t0 + kTokenBlock : num_tokens;
      for (int64_t o = o_begin; o < o_end; ++o) {
        const float* wr = w + o * in;
        for (int64_t t = t0; t < t1; ++t) y[t * out + o] = Dot(x + t * in, wr, in);
      }
    }
  });
}

void RmsNorm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * (weight ? weight[i] : 1.0f);
  }
}

void ApplyRope(float* x, int64_t rows, int64_t n, int64_t rope_dim, const float* cos,
               const float* sin, bool inverse) {
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * n + (n - rope_dim);
    for (int64_t i = 0; i < rope_dim / 2; ++i) {
      const float x0 = p[2 * i];
      const float x1 = p[2 * i + 1];
      const float c = cos[i];
      const float s = sign * sin[i];
      p[2 * i] = x0 * c - x1 * s;
      p[2 * i + 1] = x1 * c + x0 * s;
    }
  }
}

}  // namespace peregrine::cpu
