#include "kernels/bf16_gemv.cuh"

#include <cuda_bf16.h>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/streaming_load.cuh"
#include "kernels/common/warp.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kLaneK = 8;  // bf16 elements per lane and step: one 16-byte load
static_assert(kWarpSize * kLaneK == kBf16GemvStepK);

// Weight steps a warp keeps in flight, and CTAs per SM (the register budget): at one or two
// tokens more warps with fewer steps each win (measured on the H100: wq_a 10.8 -> 8.6 us, wo_b
// 31.5 -> 29.4 us at one row); at four, x's registers make fewer, wider CTAs faster.
constexpr int kUnroll = 4;
template <int kN>
constexpr int kCtasPerSm = kN <= 2 ? 4 : 2;

// The 8 bf16 of a 16-byte vector as floats (a bf16 is the top half of its float).
__device__ __forceinline__ void Unpack(const uint4 v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

template <int kN, bool kOutF32>
__device__ __forceinline__ void StoreRow(const Bf16GemvParams& p, int64_t group, int row, const float (&acc)[kN]) {
#pragma unroll
  for (int t = 0; t < kN; ++t) {
    if (t >= p.n) break;
    const int64_t at = group * p.y_group + t * p.y_stride + row;
    if constexpr (kOutF32) {
      static_cast<float*>(p.y)[at] = acc[t];
    } else {
      static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16(acc[t]);
    }
  }
}

template <int kN, bool kOutF32>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<kN>) Bf16GemvKernel(const Bf16GemvParams p) {
  constexpr int kU = kUnroll;
  __shared__ float partial[kWarps][kN];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int per_row = p.warps_per_row;
  const int slice = warp % per_row;  // this warp's steps of a row: slice, slice + per_row, ...
  // Rows first_row, first_row + row_stride, ...: several per warp when one warp owns a row
  // (the grid is capped at what is resident at once), at most one when warps share rows.
  const int row_stride = static_cast<int>(gridDim.x) * (kWarps / per_row);
  const int first_row = static_cast<int>(blockIdx.x) * (kWarps / per_row) + warp / per_row;
  const int num_rows = first_row < p.m ? (p.m - 1 - first_row) / row_stride + 1 : 0;
  const int steps = (p.k + kBf16GemvStepK - 1) / kBf16GemvStepK;
  const int blocks_per_row = (steps + kU * per_row - 1) / (kU * per_row);  // of this warp's slice
  const int num_items = num_rows * blocks_per_row;  // (row, block) pairs, row-major
  const int64_t group = blockIdx.y;
  const int lane_k = lane * kLaneK;
  const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(p.w) + group * p.w_group;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x) + group * p.x_group;

  // Item j = (row j / blocks_per_row, block j % blocks_per_row); block b holds the slice's
  // steps first + i * per_row, i < kU, first = slice + b * kU * per_row.
  uint4 w_next[kU];
  auto load_item = [&](int item) {
    const int r = item / blocks_per_row;
    const int first = slice + (item - r * blocks_per_row) * kU * per_row;
    const __nv_bfloat16* w_row = w + static_cast<int64_t>(first_row + r * row_stride) * p.k;
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      const int col = (first + i * per_row) * kBf16GemvStepK + lane_k;
      w_next[i] = item < num_items && col < p.k ? LoadStreaming16(w_row + col) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  // Weights only before the wait: nothing an earlier kernel writes.
  load_item(0);
  WaitForPredecessor();
  AllowDependents();

  float acc[kN] = {};
  for (int item = 0; item < num_items; ++item) {
    const int r = item / blocks_per_row;
    const int block = item - r * blocks_per_row;
    const int first = slice + block * kU * per_row;
    uint4 xv[kU][kN];
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      const int col = (first + i * per_row) * kBf16GemvStepK + lane_k;
#pragma unroll
      for (int t = 0; t < kN; ++t)
        xv[i][t] = col < p.k && t < p.n ? *reinterpret_cast<const uint4*>(x + t * p.x_stride + col)
                                        : make_uint4(0u, 0u, 0u, 0u);
    }
    uint4 w_now[kU];
#pragma unroll
    for (int i = 0; i < kU; ++i) w_now[i] = w_next[i];
    load_item(item + 1);  // the next block (of this row or the next) streams during this math
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      float wf[8];
      Unpack(w_now[i], wf);
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        float xf[8];
        Unpack(xv[i][t], xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
      }
    }
    if (per_row == 1 && block == blocks_per_row - 1) {  // the row is complete
#pragma unroll
      for (int t = 0; t < kN; ++t) acc[t] = WarpSum(acc[t]);
      if (lane == 0) StoreRow<kN, kOutF32>(p, group, first_row + r * row_stride, acc);
#pragma unroll
      for (int t = 0; t < kN; ++t) acc[t] = 0.0f;
    }
  }
  if (per_row == 1) return;
  // Warps share rows: each has at most one; the slice-0 warp adds the slices in warp order.
#pragma unroll
  for (int t = 0; t < kN; ++t) acc[t] = WarpSum(acc[t]);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < kN; ++t) partial[warp][t] = acc[t];
  }
  __syncthreads();
  if (slice != 0 || lane != 0 || num_rows == 0) return;
#pragma unroll
  for (int t = 0; t < kN; ++t) {
    float sum = 0.0f;
    for (int j = 0; j < per_row; ++j) sum += partial[warp + j][t];
    acc[t] = sum;
  }
  StoreRow<kN, kOutF32>(p, group, first_row, acc);
}

template <int kN>
cudaError_t LaunchTokens(const Bf16GemvParams& p, dim3 grid, cudaStream_t stream) {
  const LaunchShape shape{grid, dim3(kThreads)};
  if (p.y_f32) return LaunchDependent(Bf16GemvKernel<kN, true>, shape, stream, p);
  return LaunchDependent(Bf16GemvKernel<kN, false>, shape, stream, p);
}

}  // namespace

int Bf16GemvMaxCtas(int n, int groups, int num_sms) {
  const int per_sm = n <= 2 ? kCtasPerSm<2> : kCtasPerSm<4>;
  const int per_group = (per_sm * num_sms + groups - 1) / groups;
  return per_group > 1 ? per_group : 1;
}

int Bf16GemvWarpsPerRow(int m, int k, int groups, int num_sms) {
  const int64_t steps = (static_cast<int64_t>(k) + kBf16GemvStepK - 1) / kBf16GemvStepK;
  int per_row = 1;
  while (per_row < kWarps &&
         (static_cast<int64_t>(m) * per_row + kWarps - 1) / kWarps * groups < 2 * static_cast<int64_t>(num_sms) &&
         steps >= 4 * per_row)
    per_row *= 2;
  return per_row;
}

cudaError_t LaunchBf16Gemv(const Bf16GemvParams& p, cudaStream_t stream) {
  if (p.n < 1 || p.n > kBf16GemvMaxTokens || p.k <= 0 || p.k % kLaneK != 0 || p.m <= 0 || p.groups < 1)
    return cudaErrorInvalidValue;
  if (p.warps_per_row < 1 || p.warps_per_row > kWarps || kWarps % p.warps_per_row != 0 || p.max_ctas < 1)
    return cudaErrorInvalidValue;
  int64_t ctas = (static_cast<int64_t>(p.m) * p.warps_per_row + kWarps - 1) / kWarps;
  // Shared rows need every row in the first pass (one row per warp); own rows may repeat.
  if (p.warps_per_row == 1 && ctas > p.max_ctas) ctas = p.max_ctas;
  if (ctas > INT32_MAX || p.groups > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(p.groups));
  if (p.n == 1) return LaunchTokens<1>(p, grid, stream);
  if (p.n == 2) return LaunchTokens<2>(p, grid, stream);
  return LaunchTokens<4>(p, grid, stream);
}

}  // namespace peregrine::kernels
