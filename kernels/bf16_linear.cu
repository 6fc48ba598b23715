#include "kernels/bf16_linear.cuh"

#include <cuda_bf16.h>

#include "kernels/common/mma.cuh"
#include "kernels/common/split_k_tile.cuh"
#include "kernels/common/streaming_load.cuh"

namespace peregrine::kernels {

namespace {

using split_k::kThreads;
using split_k::kTiles;
using split_k::kWarps;
constexpr int kUnitK = kBf16LinearUnitK;
static_assert(kBf16LinearRowsPerCta == split_k::kRowsPerCta, "the shared tile epilogue's rows");

// Word i (0..7) of a lane's 32 bytes held as two 16-byte loads.
__device__ __forceinline__ uint32_t Word(const uint4 (&v)[2], int i) {
  const uint4& h = v[i / 4];
  const int j = i % 4;
  return j == 0 ? h.x : j == 1 ? h.y : j == 2 ? h.z : h.w;
}

// grid = (token tiles, k_split, row tiles of 32); cluster (1, k_split, 1) when k_split > 1.
// Wider CTAs (more token tiles) reuse each weight fragment for more MMAs; they hold more
// accumulators, so they keep one CTA per SM's registers.
template <int kNTiles, bool kOutF32>
__global__ void __launch_bounds__(kThreads, kNTiles <= 2 ? 2 : 1) Bf16LinearKernel(const Bf16LinearParams p) {
  StartAfterPredecessor();
  constexpr int kTokens = 8 * kNTiles;
  __shared__ split_k::TileSums<kNTiles> sums;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int row_tiles = (p.m + kBf16LinearRowsPerCta - 1) / kBf16LinearRowsPerCta;
  const int group = static_cast<int>(blockIdx.z) / row_tiles;
  const int m0 = (static_cast<int>(blockIdx.z) - group * row_tiles) * kBf16LinearRowsPerCta;
  const __nv_bfloat16* const x = static_cast<const __nv_bfloat16*>(p.x) + group * p.x_group;
  const __nv_bfloat16* const w = static_cast<const __nv_bfloat16*>(p.w) + group * p.w_group;
  const int units = (p.k + kUnitK - 1) / kUnitK;
  const int per_cta = (units + p.k_split - 1) / p.k_split;
  const int u_begin = static_cast<int>(blockIdx.y) * per_cta;
  const int u_end = min(units, u_begin + per_cta);

  const __nv_bfloat16* w_rows[kTiles][2];
  bool row_ok[kTiles][2];
#pragma unroll
  for (int r = 0; r < kTiles; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + 16 * r + 8 * h + g;
      row_ok[r][h] = row < p.m;
      w_rows[r][h] = w + static_cast<int64_t>(row_ok[r][h] ? row : 0) * p.k + 16 * t;
    }
  const __nv_bfloat16* x_rows[kNTiles];
  bool token_ok[kNTiles];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int64_t token = n0 + 8 * nt + g;
    token_ok[nt] = token < p.n;
    x_rows[nt] = x + (token_ok[nt] ? token : 0) * p.x_stride + 16 * t;
  }

  float acc[kTiles][kNTiles][4] = {};
  for (int u = u_begin + warp; u < u_end; u += kWarps) {
    const int k0 = u * kUnitK;
    const bool lane_ok = k0 + 16 * t < p.k;  // K is a multiple of 16: a lane's run is all in or all out
    uint4 wv[kTiles][2][2];
    uint4 xv[kNTiles][2];
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 2; ++q)
          wv[r][h][q] = lane_ok && row_ok[r][h] ? LoadStreaming16(w_rows[r][h] + k0 + 8 * q) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        xv[nt][q] = lane_ok && token_ok[nt] ? __ldg(reinterpret_cast<const uint4*>(x_rows[nt] + k0 + 8 * q))
                                            : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < kTiles; ++r) {
        const uint32_t a[4] = {Word(wv[r][0], 2 * j), Word(wv[r][1], 2 * j), Word(wv[r][0], 2 * j + 1),
                               Word(wv[r][1], 2 * j + 1)};
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) MmaBF16(acc[r][nt], a, Word(xv[nt], 2 * j), Word(xv[nt], 2 * j + 1));
      }
  }

  split_k::SumAndStore(sums, acc, p.k_split, [&](int token_in_tile, int row_in_tile, float v) {
    const int64_t token = n0 + token_in_tile;
    const int row = m0 + row_in_tile;
    if (token >= p.n || row >= p.m) return;
    const int64_t at = group * p.y_group + token * p.y_stride + row;
    if constexpr (kOutF32) {
      static_cast<float*>(p.y)[at] = v;
    } else {
      static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16_rn(v);
    }
  });
}

using KernelFn = void (*)(Bf16LinearParams);
// [y is f32][log2 of the token tiles per CTA]
constexpr KernelFn kKernels[2][4] = {
    {Bf16LinearKernel<1, false>, Bf16LinearKernel<2, false>, Bf16LinearKernel<4, false>, Bf16LinearKernel<8, false>},
    {Bf16LinearKernel<1, true>, Bf16LinearKernel<2, true>, Bf16LinearKernel<4, true>, Bf16LinearKernel<8, true>}};

}  // namespace

int Bf16LinearKSplit(int m, int k, int num_sms, int compute_major) {
  return split_k::KSplit(m, (k + kUnitK - 1) / kUnitK, 8, kBf16LinearMaxKSplit, num_sms, compute_major);
}

cudaError_t LaunchBf16Linear(const Bf16LinearParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.m <= 0 || p.k <= 0 || p.k % 16 != 0 || p.x_stride < p.k || p.x_stride % 8 != 0 || p.y_stride < p.m ||
      p.k_split < 1 || p.k_split > kBf16LinearMaxKSplit || p.groups < 1 || p.x_group % 8 != 0 || p.w_group % 8 != 0)
    return cudaErrorInvalidValue;
  const int64_t row_tiles = (static_cast<int64_t>(p.m) + kBf16LinearRowsPerCta - 1) / kBf16LinearRowsPerCta;
  if (row_tiles * p.groups > 65535) return cudaErrorInvalidValue;
  // Tokens per CTA (8 to 64, by N) change only the N side of the MMAs, never a sum's order.
  const int width = p.n <= 8 ? 0 : p.n <= 16 ? 1 : p.n <= 32 ? 2 : 3;
  return split_k::Launch(kKernels[p.y_f32 ? 1 : 0][width], p, p.n, 8 << width, static_cast<int>(row_tiles * p.groups) *
                         kBf16LinearRowsPerCta, p.k_split, stream);
}

}  // namespace peregrine::kernels
