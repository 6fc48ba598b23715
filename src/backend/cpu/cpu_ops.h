// The CPU reference ops: plain loops, fp32 storage and accumulation, row-major arrays.
// Every function states its shapes; none allocates unless its contract says so.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cpu/thread_pool.h"

namespace peregrine::cpu {

// y[t, o] = sum_i x[t, i] * w[o, i]          x [T, in], w [out, in], y [T, out]
// Each output row is computed the same way whatever T is, so a token's result never
// depends on how many tokens share the call (chunked prefill equals a full forward).
void Linear(ThreadPool& pool, const float* x, const float* w, float* y, int64_t num_tokens,
            int64_t in, int64_t out);

float Dot(const float* a, const float* b, int64_t n);

// y = x * rsqrt(mean(x^2) + eps) * weight, per row of width n; weight may be null
// (unweighted). In place is allowed (y == x).                     x, y [rows, n]
void RmsNorm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, float eps);

// Interleaved (GPT-J) rotary embedding on the trailing `rope_dim` values of each row:
// pairs (2i, 2i+1) of the rope slice rotate by angle i. `inverse` rotates by -angle.
//   x [rows, n] (in place), cos/sin [rope_dim / 2]
void ApplyRope(float* x, int64_t rows, int64_t n, int64_t rope_dim, const float* cos,
               const float* sin, bool inverse);

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace peregrine::cpu
