#include "kernels/fp8_w8a16.cuh"

#include <cuda_bf16.h>

#include "kernels/common/mma.cuh"
#include "kernels/common/split_k_tile.cuh"
#include "kernels/common/streaming_load.cuh"

namespace peregrine::kernels {

namespace {

using split_k::kThreads;
using split_k::kTiles;
using split_k::kWarps;
constexpr int kUnitK = kW8A16ScaleBlock;               // K per unit: one scale block
constexpr int kChunkK = 64;                            // K a row's 4 lanes cover with one 16-byte load each
constexpr int kChunksPerUnit = kUnitK / kChunkK;
static_assert(kW8A16RowsPerCta == split_k::kRowsPerCta, "the shared tile epilogue's rows");
static_assert(kW8A16MinK == kChunkK, "a partial unit is one 64-wide chunk");

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Two e4m3 codes of `word` (bytes picked by `selector` into the high byte of each half) as a
// bf16x2 of the same values. Moving sign, exponent and mantissa into bf16's fields gives
// value * 2^-120 (e4m3's exponent bias 7 read with bf16's 127; e4m3 subnormals land on bf16
// subnormals), so one exact multiply by 2^120 restores it.
__device__ __forceinline__ uint32_t E4M3PairToBF16(uint32_t word, uint32_t selector) {
  const uint32_t r = __byte_perm(word, 0u, selector);
  uint32_t bits = (r & 0x80008000u) | ((r & 0x7f007f00u) >> 4);
  constexpr uint32_t kTwoPow120 = 0x7b807b80u;  // bf16 2^120 in both halves
  __nv_bfloat162 v, k;
  static_assert(sizeof(v) == 4, "bf16x2 is 4 bytes");
  __builtin_memcpy(&v, &bits, 4);
  __builtin_memcpy(&k, &kTwoPow120, 4);
  v = __hmul2(v, k);
  __builtin_memcpy(&bits, &v, 4);
  return bits;
}
constexpr uint32_t kLowPair = 0x1404;   // bytes 0, 1 -> the high bytes of the two halves
constexpr uint32_t kHighPair = 0x3424;  // bytes 2, 3

// The K-index permutation that lets a lane's contiguous bytes feed its MMA fragments: in
// 64-wide chunk c, lane (g, t) loads K [16t, 16t + 16) of rows g and g + 8; its bytes
// 4j..4j+3 are MMA k-step j's logical columns {2t, 2t+1} (bytes 0-1) and {2t+8, 2t+9}
// (bytes 2-3). x is read with the same permutation (32 contiguous bytes per lane and token),
// so the dot products are unchanged.
//
// grid = (token tiles, k_split, row tiles of 32); cluster (1, k_split, 1) when k_split > 1.
template <int kNTiles, bool kOutF32>
__global__ void __launch_bounds__(kThreads, 2) Fp8W8A16Kernel(const Fp8W8A16Params p) {
  StartAfterPredecessor();
  constexpr int kTokens = 8 * kNTiles;
  __shared__ split_k::TileSums<kNTiles> sums;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int m0 = static_cast<int>(blockIdx.z) * kW8A16RowsPerCta;
  const int units = (p.k + kUnitK - 1) / kUnitK;  // also the scale table's width
  const int per_cta = (units + p.k_split - 1) / p.k_split;
  const int u_begin = static_cast<int>(blockIdx.y) * per_cta;
  const int u_end = min(units, u_begin + per_cta);

  const uint8_t* w_rows[kTiles][2];
  bool row_ok[kTiles][2];
  const float* scale_row[kTiles];
#pragma unroll
  for (int r = 0; r < kTiles; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + 16 * r + 8 * h + g;
      row_ok[r][h] = row < p.m;
      w_rows[r][h] = p.w + static_cast<int64_t>(row_ok[r][h] ? row : 0) * p.k + 16 * t;
    }
    scale_row[r] = p.scale + static_cast<int64_t>(min(m0 + 16 * r, p.m - 1) / kW8A16ScaleBlock) * units;
  }
  const __nv_bfloat16* x_rows[kNTiles];
  bool token_ok[kNTiles];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int64_t token = n0 + 8 * nt + g;
    token_ok[nt] = token < p.n;
    x_rows[nt] = static_cast<const __nv_bfloat16*>(p.x) + (token_ok[nt] ? token : 0) * p.k + 16 * t;
  }

  float acc[kTiles][kNTiles][4] = {};
  for (int u = u_begin + warp; u < u_end; u += kWarps) {
    const int k0 = u * kUnitK;
    const bool has_second = k0 + kChunkK < p.k;
    // Every load of the unit first (8 weight + 4 x loads per lane in flight), then the math.
    uint4 wv[kChunksPerUnit][kTiles][2];
    uint4 xv[kChunksPerUnit][kNTiles][2];
#pragma unroll
    for (int c = 0; c < kChunksPerUnit; ++c) {
      const bool chunk_ok = c == 0 || has_second;
#pragma unroll
      for (int r = 0; r < kTiles; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wv[c][r][h] = chunk_ok && row_ok[r][h] ? LoadStreaming16(w_rows[r][h] + k0 + c * kChunkK)
                                                 : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const uint4* src = reinterpret_cast<const uint4*>(x_rows[nt] + k0 + c * kChunkK);
        const bool ok = chunk_ok && token_ok[nt];
        xv[c][nt][0] = ok ? __ldg(src) : make_uint4(0, 0, 0, 0);
        xv[c][nt][1] = ok ? __ldg(src + 1) : make_uint4(0, 0, 0, 0);
      }
    }
    float blk[kTiles][kNTiles][4] = {};
#pragma unroll
    for (int c = 0; c < kChunksPerUnit; ++c) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int r = 0; r < kTiles; ++r) {
          const uint32_t top = Word(wv[c][r][0], j), bottom = Word(wv[c][r][1], j);
          const uint32_t a[4] = {E4M3PairToBF16(top, kLowPair), E4M3PairToBF16(bottom, kLowPair),
                                 E4M3PairToBF16(top, kHighPair), E4M3PairToBF16(bottom, kHighPair)};
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
            MmaBF16(blk[r][nt], a, Word(xv[c][nt][j / 2], (2 * j) % 4), Word(xv[c][nt][j / 2], (2 * j + 1) % 4));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kTiles; ++r) {
      const float s = __ldg(scale_row[r] + u);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][nt][i] = fmaf(s, blk[r][nt][i], acc[r][nt][i]);
    }
  }

  split_k::SumAndStore(sums, acc, p.k_split, [&](int token_in_tile, int row_in_tile, float v) {
    const int64_t token = n0 + token_in_tile;
    const int row = m0 + row_in_tile;
    if (token >= p.n || row >= p.m) return;
    const int64_t at = token * p.m + row;
    if constexpr (kOutF32) {
      static_cast<float*>(p.y)[at] = v;
    } else {
      static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16_rn(v);
    }
  });
}

using KernelFn = void (*)(Fp8W8A16Params);
// [token tiles per CTA - 1][y is f32]
constexpr KernelFn kKernels[2][2] = {{Fp8W8A16Kernel<1, false>, Fp8W8A16Kernel<2, false>},
                                     {Fp8W8A16Kernel<1, true>, Fp8W8A16Kernel<2, true>}};

}  // namespace

int Fp8W8A16KSplit(int m, int k, int num_sms, int compute_major) {
  return split_k::KSplit(m, (k + kUnitK - 1) / kUnitK, 4, kW8A16MaxKSplit, num_sms, compute_major);
}

cudaError_t LaunchFp8W8A16(const Fp8W8A16Params& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.m <= 0 || p.k <= 0 || p.k % kW8A16MinK != 0 || p.k_split < 1 || p.k_split > kW8A16MaxKSplit)
    return cudaErrorInvalidValue;
  const int wide = p.n > 8 ? 1 : 0;
  return split_k::Launch(kKernels[p.y_f32 ? 1 : 0][wide], p, p.n, 8 << wide, p.m, p.k_split, stream);
}

}  // namespace peregrine::kernels
