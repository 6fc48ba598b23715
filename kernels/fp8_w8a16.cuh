// W8A16 block-scaled projection for decode-sized batches:
//   y[N, M] = x[N, K] . (w[M, K] * scale[M/128, K/128])^T
// x bf16, w FP8 e4m3 with one f32 scale per 128x128 block (the checkpoint's dense
// projections), fp32 accumulation, y bf16 or f32.
//
// The kernel is bound by the weight stream, and every weight byte is read and widened once
// for up to 64 tokens: a CTA owns a tile of output rows and all tokens of the batch (N > 64
// is tiled over grid.x, 64 tokens per CTA). Each of its 8 warps computes 32 output rows (two
// m16 tiles) x all tokens (up to 8 n8 tiles) with m16n8k16 bf16 MMAs; a weight fragment is
// widened once in registers and multiplied with every token tile. The weights [rows, 128] and
// x [tokens, 128] of each 128-deep K unit (one scale block) are staged in shared memory by
// cp.async, several units ahead (a ring of stages). Widening is exact: e4m3 -> bf16 by
// moving bits, then one bf16 multiply by 2^120, which also covers the subnormals. A unit's
// fp32 partial sum is multiplied by its block scale and added to the running fp32 sums (so
// any f32 scale works, not only powers of two).
//
// The K units of a row tile are split over the CTAs of a thread-block cluster (sm_90) and,
// for the smallest M, over groups of warps of a CTA (each group owning fewer rows); partial
// sums are added in shared memory in group order, then across the cluster in rank order
// through distributed shared memory. The split depends only on (M, K) and the SM count, so a
// token's output does not depend on N or on the other tokens of its batch.
//
// NaN codes (0x7f, 0xff) are not decoded as NaN (checkpoints hold none). No atomics, no
// allocation: capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kW8A16ScaleBlock = 128;  // weight rows and columns per scale
inline constexpr int kW8A16MinK = 64;         // K must be a positive multiple of this
inline constexpr int kW8A16TokensPerCta = 64; // N > 64 is tiled over the grid
// Output rows of a CTA: 256 with one warp group, 128 with two, 64 with four. The smallest
// bounds the grid's row tiles (grid.z <= 65535).
inline constexpr int kW8A16RowsPerCta = 64;
inline constexpr int kW8A16MaxClusterSplit = 8;  // CTAs of one cluster sharing a row tile's K
inline constexpr int kW8A16MaxWarpGroups = 4;    // warp groups of a CTA sharing a row tile's K
inline constexpr int kW8A16MaxKSplit = kW8A16MaxClusterSplit * kW8A16MaxWarpGroups;

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

// How many ways the K range of a row tile is split: cluster CTAs x warp groups per CTA, a
// power of two up to kW8A16MaxKSplit. The cluster (up to 8, sm_90 and later) is doubled from
// 1 while the grid of row tiles stays under one CTA per SM and every warp group keeps a K
// unit; only once it is at 8 and the grid is still under half the SMs are the warp groups
// doubled (smaller row tiles, so more of them). So the launcher reads it back as
// cluster = min(k_split, 8), warp groups = k_split / cluster. 1 below compute capability 9.
int Fp8W8A16KSplit(int m, int k, int num_sms, int compute_major);

// cudaErrorInvalidValue for a bad shape or k_split; otherwise the launch's own error.
cudaError_t LaunchFp8W8A16(const Fp8W8A16Params& p, cudaStream_t stream);

}  // namespace peregrine::kernels
