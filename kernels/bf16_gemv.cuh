// Decode-sized bf16 projection (the default path at N <= kBf16GemvMaxTokens rows, cuBLAS above):
//   y[N, M] = x[N, K] . w[M, K]^T
// x and w bf16, fp32 accumulation, y bf16 or f32; rows of x and y may be strided and `groups`
// > 1 runs that many projections of one shape in a launch (the grouped output projection).
//
// At one to a few tokens a projection is a stream of its weights: every weight byte is read
// once and used N times. A warp walks an output row's K in 256-wide steps (a lane takes 8
// contiguous elements: one 16-byte load), with the weight loads of the next block of steps in
// flight during the current block's math, also across the boundary to its next row: the grid
// is capped at what is resident at once and each warp takes rows w, w + (warps in the grid), ..., so
// short rows (wq_b: K = 1024) still keep the stream busy. For few rows (M below ~2 CTAs per
// SM) the 8 warps of a CTA split each row's steps between 2, 4 or 8 of them
// (`warps_per_row`, one row per warp), whose sums are added in warp order. The first steps' weights are loaded before the kernel waits for its predecessor
// (programmatic dependent launch; weights never change during a step), so the stream starts
// under the previous kernel's tail. Every lane's products are summed in step order, the lanes
// by a butterfly: the result is the same for every launch of one shape. No atomics, no
// allocation: capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kBf16GemvMaxTokens = 4;  // past it x's conversions outweigh the stream
inline constexpr int kBf16GemvStepK = 256;  // K per warp step (32 lanes x 8 elements)

struct Bf16GemvParams {
  const void* x = nullptr;  // [n, x_stride] bf16, 16-byte aligned rows
  const void* w = nullptr;  // [m, k] bf16, 16-byte aligned
  void* y = nullptr;        // [n, y_stride] bf16 or f32
  bool y_f32 = false;
  int n = 0;                // 1 .. kBf16GemvMaxTokens
  int m = 0;
  int k = 0;                // a positive multiple of 8
  int64_t x_stride = 0;     // elements between rows of x (>= k, a multiple of 8)
  int64_t y_stride = 0;     // elements between rows of y (>= m)
  int warps_per_row = 1;    // 1, 2, 4 or 8: from Bf16GemvWarpsPerRow
  int max_ctas = 1;         // per group, with warps_per_row 1: from Bf16GemvMaxCtas
  // Group i reads x + i * x_group, w + i * w_group and writes y + i * y_group (elements; x's
  // and w's multiples of 8).
  int groups = 1;
  int64_t x_group = 0, w_group = 0, y_group = 0;
};

// The warps that share one row: doubled from 1 while the grid (groups x M rows, 8 warps a CTA)
// stays under two CTAs per SM and each warp keeps at least two K steps.
int Bf16GemvWarpsPerRow(int m, int k, int groups, int num_sms);
// The grid's CTAs per group when each warp owns its rows: as many as fit on the device at once
// for n tokens (4 per SM at n <= 2, 2 at more), over all groups.
int Bf16GemvMaxCtas(int n, int groups, int num_sms);

// cudaErrorInvalidValue for n outside 1 .. kBf16GemvMaxTokens, a K that is not a positive
// multiple of 8, or a grid that does not fit.
cudaError_t LaunchBf16Gemv(const Bf16GemvParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
