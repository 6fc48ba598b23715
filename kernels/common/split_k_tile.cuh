// The tile epilogue and launch shared by the decode projection kernels that split K over the
// warps of a CTA and the CTAs of a cluster (fp8_w8a16, bf16_linear): a CTA owns 32 output
// rows x kTokens tokens; each warp holds m16n8 accumulators of its own K units for two m16
// tiles; the warps' sums are added in warp order, then (k_split > 1) rank 0 of the cluster
// adds the CTAs' sums in rank order. Every output's order of additions depends only on the
// K split, never on the tokens, so a token's result is the same in any batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/cluster.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels::split_k {

inline constexpr int kRowsPerCta = 32;
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kTiles = kRowsPerCta / 16;  // m16 tiles per warp
inline constexpr int kSumStride = kRowsPerCta + 4;  // padded token row of a warp's partial tile

// Shared memory of one CTA's epilogue: the warps' partial sums of two token tiles at a time
// (wider CTAs sum theirs in rounds, so shared memory stays under the static 48 KiB), and the
// CTA's whole tile for the cluster's sum.
template <int kNTiles>
struct TileSums {
  static constexpr int kTokens = 8 * kNTiles;
  static constexpr int kTileElems = kTokens * kRowsPerCta;
  static constexpr int kRoundTiles = kNTiles < 2 ? kNTiles : 2;
  static constexpr int kRoundElems = 8 * kRoundTiles * kRowsPerCta;
  float partial[kWarps][8 * kRoundTiles * kSumStride];  // [warp][token of the round][row] (padded)
  float cta_sum[kTileElems];                             // [token][row]
};

// Sums the CTA's tile and calls store(token in tile, row in tile, value) for each output,
// on rank 0 of the cluster when k_split > 1. Every thread of every CTA of the cluster calls it.
template <int kNTiles, typename Store>
__device__ __forceinline__ void SumAndStore(TileSums<kNTiles>& s, const float (&acc)[kTiles][kNTiles][4], int k_split,
                                            Store store) {
  using Sums = TileSums<kNTiles>;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  float* mine = s.partial[warp];
#pragma unroll
  for (int first = 0; first < kNTiles; first += Sums::kRoundTiles) {
    if (first > 0) __syncthreads();  // the previous round's partials are read
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int i = 0; i < Sums::kRoundTiles; ++i) {
        const int nt = first + i;
        const int row = 16 * r + g, token = 8 * i + 2 * t;
        mine[token * kSumStride + row] = acc[r][nt][0];
        mine[(token + 1) * kSumStride + row] = acc[r][nt][1];
        mine[token * kSumStride + row + 8] = acc[r][nt][2];
        mine[(token + 1) * kSumStride + row + 8] = acc[r][nt][3];
      }
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < Sums::kRoundElems; e += kThreads) {
      const int token = e / kRowsPerCta, row = e % kRowsPerCta;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += s.partial[w][token * kSumStride + row];
      if (k_split == 1) {
        store(8 * first + token, row, sum);
      } else {
        s.cta_sum[(8 * first + token) * kRowsPerCta + row] = sum;
      }
    }
  }
  if (k_split == 1) return;
  // The cluster's CTAs hold partial sums of the same outputs over disjoint K ranges; the
  // second barrier keeps the peers' shared memory alive until rank 0 has read them.
  ClusterSync();
  if (ClusterRank() == 0) {
    for (int e = static_cast<int>(threadIdx.x); e < Sums::kTileElems; e += kThreads) {
      float sum = 0.0f;
      for (int q = 0; q < k_split; ++q) sum += ClusterPeer(s.cta_sum, q)[e];
      store(e / kRowsPerCta, e % kRowsPerCta, sum);
    }
  }
  ClusterSync();
}

// How many CTAs (one cluster) share the K range of a row tile: doubled from 1 while the grid
// of row tiles stays under two CTAs per SM and each CTA keeps at least `min_units` K units;
// 1 without clusters (compute capability below 9).
inline int KSplit(int m, int units, int min_units, int max_split, int num_sms, int compute_major) {
  if (compute_major < 9 || m <= 0 || units <= 0) return 1;
  const int64_t row_tiles = (static_cast<int64_t>(m) + kRowsPerCta - 1) / kRowsPerCta;
  int split = 1;
  while (split < max_split && row_tiles * split < 2 * static_cast<int64_t>(num_sms) && units >= 2 * min_units * split)
    split *= 2;
  return split;
}

// grid = (token tiles of `tokens_per_cta`, k_split, row tiles of 32), cluster (1, k_split, 1)
// when k_split > 1.
template <typename Params>
cudaError_t Launch(void (*kernel)(Params), const Params& p, int64_t n, int tokens_per_cta, int m, int k_split,
                   cudaStream_t stream) {
  const int64_t token_tiles = (n + tokens_per_cta - 1) / tokens_per_cta;
  const int64_t row_tiles = (static_cast<int64_t>(m) + kRowsPerCta - 1) / kRowsPerCta;
  if (token_tiles > INT32_MAX || row_tiles > 65535) return cudaErrorInvalidValue;
  const LaunchShape shape{dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(k_split),
                               static_cast<unsigned>(row_tiles)),
                          dim3(kThreads), 0, dim3(1, static_cast<unsigned>(k_split), 1)};
  return LaunchDependent(kernel, shape, stream, p);
}

}  // namespace peregrine::kernels::split_k
