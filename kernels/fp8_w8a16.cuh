// W8A16 block-scaled projection for decode-sized batches:
//   y[N, M] = x[N, K] . (w[M, K] * scale[M/128, K/128])^T
// x bf16, w FP8 e4m3 with one f32 scale per 128x128 block (the checkpoint's dense
// projections), fp32 accumulation, y bf16 or f32.
//
// The kernel is bound by the weight stream: every weight byte is read once per 16 tokens.
// Each warp owns 32 output rows (two m16 tiles) and a set of 128-deep K units; per unit a
// thread issues eight 16-byte weight loads (L1 bypassed) and four 16-byte x loads (L1
// cached: every CTA reads the same x), widens the e4m3 codes to bf16 in registers (exact:
// e4m3 -> bf16 by moving bits, then one bf16 multiply by 2^120, which also covers the
// subnormals), and runs m16n8k16 bf16 MMAs. A unit's fp32 partial sum is multiplied by its
// block scale and added to the running fp32 sums (so any f32 scale works, not only powers
// of two). The K units are spread over the 8 warps of a CTA and, for shapes with few row
// tiles, over the CTAs of a thread-block cluster (sm_90); partial sums are added in shared
// memory (and, across a cluster, by rank 0 through distributed shared memory) in a fixed
// order. Tokens are tiled 8 or 16 per CTA (grid.x), so any N works; the split of K depends
// only on (M, K) and the SM count, so a token's output does not depend on the batch it is in.
//
// NaN codes (0x7f, 0xff) are not decoded as NaN (checkpoints hold none). No atomics, no
// allocation: capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kW8A16ScaleBlock = 128;  // weight rows and columns per scale
inline constexpr int kW8A16MinK = 64;         // K must be a positive multiple of this
inline constexpr int kW8A16RowsPerCta = 32;
inline constexpr int kW8A16MaxKSplit = 8;     // CTAs of one cluster sharing a row tile's K

struct Fp8W8A16Params {
  const void* x = nullptr;        // [n, k] bf16, rows contiguous, 16-byte aligned
  const uint8_t* w = nullptr;     // [m, k] e4m3, 16-byte aligned
  const float* scale = nullptr;   // [ceil(m / 128), ceil(k / 128)] f32
  void* y = nullptr;              // [n, m] bf16 or f32
  bool y_f32 = false;
  int64_t n = 0;
  int m = 0;
  int k = 0;                      // a multiple of kW8A16MinK
  int k_split = 1;                // from Fp8W8A16KSplit
};

// How many CTAs (one cluster) share the K range of a row tile: doubled from 1 while the grid
// of row tiles stays under two CTAs per SM and each CTA keeps at least 4 K units; 1 without
// clusters (compute capability below 9).
int Fp8W8A16KSplit(int m, int k, int num_sms, int compute_major);

cudaError_t LaunchFp8W8A16(const Fp8W8A16Params& p, cudaStream_t stream);

}  // namespace peregrine::kernels
