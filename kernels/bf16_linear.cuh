// Batch-invariant bf16 projection (--enable-deterministic-inference):
//   y[N, M] = x[N, K] . w[M, K]^T
// x and w bf16, fp32 accumulation, y bf16 or f32; rows of x and y may be strided (the grouped
// output projection reads one head group of each row).
//
// A token's output does not depend on how many tokens share the call or where it sits among
// them: every output element is summed in one fixed order that depends only on (M, K) and the
// SM count. Each warp owns 32 output rows (two m16 tiles) and the 64-deep K units u = warp,
// warp + 8, ... of its CTA's K range, accumulated in unit order with m16n8k16 MMAs; the 8
// warps' partial sums are added in warp order, and when the K range is split over the CTAs of
// a thread-block cluster (sm_90, for shapes with few row tiles) rank 0 adds the CTAs' sums in
// rank order. Tokens are only the MMA's N side (8 to 64 per CTA, grid.x), whose columns never
// mix. cuBLAS picks its algorithm (and split-K) by N, which is why the default path is not
// batch-invariant.
//
// Lane (g, t) of a warp loads K [16t, 16t + 16) of a 64-wide unit for rows g and g + 8 (two
// 16-byte loads each) and of token g; MMA k-step j takes the lane's elements 4j, 4j + 1 as the
// fragment's k = 2t, 2t + 1 and 4j + 2, 4j + 3 as k = 2t + 8, 2t + 9, on both sides, so the
// dot products are those of the unpermuted order. (Loads of K [8t, 8t + 8) and [32 + 8t, 40 +
// 8t) instead, 64 contiguous bytes per row and load, measured ~10% faster at one token on the
// H200; not adopted yet, see bench/results/h200/deterministic/NOTES.md.) `groups` > 1 runs that many
// independent projections of the same shape in one launch (the grouped output projection's
// head groups). No atomics, no allocation: capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kBf16LinearUnitK = 64;      // K per unit; K must be a positive multiple of 16
inline constexpr int kBf16LinearRowsPerCta = 32;
inline constexpr int kBf16LinearMaxKSplit = 8;   // CTAs of one cluster sharing a row tile's K

struct Bf16LinearParams {
  const void* x = nullptr;  // [n, x_stride] bf16, 16-byte aligned rows
  const void* w = nullptr;  // [m, k] bf16, 16-byte aligned
  void* y = nullptr;        // [n, y_stride] bf16 or f32
  bool y_f32 = false;
  int64_t n = 0;
  int m = 0;
  int k = 0;                // a multiple of 16
  int64_t x_stride = 0;     // elements between rows of x (>= k, a multiple of 8)
  int64_t y_stride = 0;     // elements between rows of y (>= m)
  int k_split = 1;          // from Bf16LinearKSplit
  // Group i reads x + i * x_group, w + i * w_group and writes y + i * y_group (elements; x's
  // and w's multiples of 8).
  int groups = 1;
  int64_t x_group = 0, w_group = 0, y_group = 0;
};

// How many CTAs (one cluster) share the K range of a row tile: doubled from 1 while the grid
// of row tiles stays under two CTAs per SM and each CTA keeps at least 8 K units; 1 without
// clusters (compute capability below 9). Independent of N by construction.
int Bf16LinearKSplit(int m, int k, int num_sms, int compute_major);

cudaError_t LaunchBf16Linear(const Bf16LinearParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
