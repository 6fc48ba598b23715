#include "kernels/rms_norm.cuh"

#include <array>
#include <cuda_bf16.h>

#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/kv_fp8_row.h"
#include "kernels/common/rope_pair.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kBlockThreads = 256;

// Threads that share one row: the compile-time sizes this kernel is built for.
struct RmsNormConfig {
  int max_n;
  int threads_per_row;
};
constexpr std::array<RmsNormConfig, 2> kConfigs = {{{kRmsNormWarpRowMax, 32}, {1 << 30, kBlockThreads}}};

// Eight consecutive elements as floats (16 bytes of bf16, 32 of fp32).
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&v)[8]);
template <>
__device__ __forceinline__ void Load8<__nv_bfloat16>(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
template <>
__device__ __forceinline__ void Load8<float>(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename T>
__device__ __forceinline__ void Store8(T* p, const float (&v)[8]);
template <>
__device__ __forceinline__ void Store8<__nv_bfloat16>(__nv_bfloat16* p, const float (&v)[8]) {
  uint4 raw;
  raw.x = PackBF16x2(v[0], v[1]);
  raw.y = PackBF16x2(v[2], v[3]);
  raw.z = PackBF16x2(v[4], v[5]);
  raw.w = PackBF16x2(v[6], v[7]);
  *reinterpret_cast<uint4*>(p) = raw;
}
template <>
__device__ __forceinline__ void Store8<float>(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Values i .. i + 7 of a row (this lane's) that lie below `nope` round-trip through V4's FP8 KV
// format: the 8 lanes holding a block of 64 agree on its largest magnitude, then each value
// becomes e4m3 under the block's power-of-two scale and back (exact in bf16 and f32).
__device__ __forceinline__ void RoundTripFp8Block(float (&v)[8], int i, int nope) {
  static_assert(kKvFp8Block == 64);
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (i + k < nope) amax = fmaxf(amax, fabsf(v[k]));  // fmaxf leaves NaN out
#pragma unroll
  for (int offset = 1; offset < 8; offset <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const uint8_t code = KvFp8ScaleCode(amax);
  const float scale = KvFp8Scale(code);
  const float inverse = KvFp8InverseScale(code);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (i + k < nope) v[k] = KvFp8DecodeE4M3(KvFp8EncodeE4M3(v[k] * inverse)) * scale;
}

// Stores values i .. i + 7 of a row, the pairs from rope_begin on rotated (from their rounded
// values) when cos_row is given.
template <typename Out>
__device__ __forceinline__ void RotateAndStore(Out* y, int i, float (&v)[8], int rope_begin, const float* cos_row,
                                               const float* sin_row) {
  if (cos_row != nullptr && i >= rope_begin) {  // rope_begin is a multiple of 8
    const int pair0 = (i - rope_begin) / 2;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 r = RotatePair(ToFloat(FromFloat<Out>(v[2 * k])), ToFloat(FromFloat<Out>(v[2 * k + 1])),
                                  cos_row[pair0 + k], sin_row[pair0 + k]);
      v[2 * k] = r.x;
      v[2 * k + 1] = r.y;
    }
  }
  Store8(y + i, v);
}

template <typename In, typename Out, int kThreadsPerRow>
__global__ void __launch_bounds__(kBlockThreads) RmsNormKernel(const RmsNormParams p) {
  StartAfterPredecessor();
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  __shared__ float scratch[kBlockThreads / kWarpSize];
  const int sub = static_cast<int>(threadIdx.x) / kThreadsPerRow;
  const int lane = static_cast<int>(threadIdx.x) % kThreadsPerRow;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + sub;
  const bool active = row < p.rows;
  const int n = p.n;
  const In* x = static_cast<const In*>(p.x) + (active ? row : 0) * n;
  Out* y = static_cast<Out*>(p.y) + (active ? row : 0) * n;
  // Uniform over the launch: rows of a multiple of 8 are 16-byte aligned in both types.
  const bool vectorised = n % 8 == 0;

  float ss = 0.0f;
  if (active) {
    if (vectorised) {
      for (int i = lane * 8; i < n; i += kThreadsPerRow * 8) {
        float v[8];
        Load8(x + i, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
      }
    } else {
      for (int i = lane; i < n; i += kThreadsPerRow) {
        const float v = ToFloat(x[i]);
        ss += v * v;
      }
    }
  }
  if constexpr (kThreadsPerRow == kWarpSize) {
    ss = WarpSum(ss);
  } else {
    static_assert(kThreadsPerRow == kBlockThreads);
    ss = BlockSum<kBlockThreads>(ss, scratch);
  }
  if (!active) return;
  const float scale = rsqrtf(ss / static_cast<float>(n) + p.eps);
  const float* w = p.weight;
  if (vectorised) {
    // Fused RoPE: this row's table row, or null (no rotation, or a position off the table).
    const int rope_begin = n - p.rope_dim;
    const float* cos_row = nullptr;
    const float* sin_row = nullptr;
    if (p.rope_positions != nullptr) {
      const int pos = p.rope_positions[row / p.rope_rows_per_position];
      if (pos >= 0 && pos < p.rope_num_positions) {
        cos_row = p.rope_cos + static_cast<int64_t>(pos) * (p.rope_dim / 2);
        sin_row = p.rope_sin + static_cast<int64_t>(pos) * (p.rope_dim / 2);
      }
    }
    // With the FP8 rounding every lane runs every pass (it reduces over groups of 8 lanes);
    // without it a lane past the row stops.
    for (int base = 0; base < n; base += kThreadsPerRow * 8) {
      const int i = base + lane * 8;
      if (i >= n && p.fp8_nope == 0) break;
      float v[8] = {};
      if (i < n) {
        Load8(x + i, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = v[k] * scale * (w != nullptr ? w[i + k] : 1.0f);
      }
      if (p.fp8_nope > 0) RoundTripFp8Block(v, i, p.fp8_nope);
      if (i >= n) continue;
      RotateAndStore(y, i, v, rope_begin, cos_row, sin_row);
    }
  } else {
    for (int i = lane; i < n; i += kThreadsPerRow) {
      y[i] = FromFloat<Out>(ToFloat(x[i]) * scale * (w != nullptr ? w[i] : 1.0f));
    }
  }
}

template <typename In, typename Out, size_t kConfig>
cudaError_t LaunchConfig(const RmsNormParams& p, cudaStream_t stream) {
  constexpr int kThreadsPerRow = kConfigs[kConfig].threads_per_row;
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  const int64_t blocks = (p.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return LaunchDependent(RmsNormKernel<In, Out, kThreadsPerRow>, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kBlockThreads)}, stream, p);
}

template <typename In, typename Out>
cudaError_t LaunchTyped(const RmsNormParams& p, cudaStream_t stream) {
  // The first table entry whose width covers n.
  return p.n <= kConfigs[0].max_n ? LaunchConfig<In, Out, 0>(p, stream) : LaunchConfig<In, Out, 1>(p, stream);
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.rows > (int64_t{1} << 31) * (kBlockThreads / 32) || p.n <= 0) return cudaErrorInvalidValue;
  if (p.rope_positions != nullptr &&
      (p.rope_dim <= 0 || p.rope_dim % 8 != 0 || p.rope_dim > p.n || p.n % 8 != 0 || p.rope_cos == nullptr ||
       p.rope_sin == nullptr || p.rope_rows_per_position <= 0))
    return cudaErrorInvalidValue;
  if (p.fp8_nope < 0 || p.fp8_nope % 8 != 0 || p.fp8_nope > p.n || (p.fp8_nope > 0 && p.n % 8 != 0))
    return cudaErrorInvalidValue;
  const bool in_bf16 = p.in_type == ElementType::kBF16;
  const bool out_bf16 = p.out_type == ElementType::kBF16;
  if (in_bf16 && out_bf16) return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(p, stream);
  if (in_bf16) return LaunchTyped<__nv_bfloat16, float>(p, stream);
  if (out_bf16) return LaunchTyped<float, __nv_bfloat16>(p, stream);
  return LaunchTyped<float, float>(p, stream);
}

}  // namespace peregrine::kernels
