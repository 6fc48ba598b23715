#include "kernels/quantize_mxfp4.cuh"

#include <cuda_bf16.h>

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 32;

// ceil(log2(y)) for y > 0, exactly: y = m 2^e with m in [0.5, 1) has log2 in [e - 1, e), equal
// to e - 1 only when m is 0.5. (The host's log2 agrees: y = amax / 6 with a float amax is
// either a power of two or at least 2^-25 away from one, far beyond a double's rounding.)
__device__ __forceinline__ int CeilLog2(double y) {
  int e = 0;
  const double m = frexp(y, &e);
  return m == 0.5 ? e - 1 : e;
}

// The e2m1 code of v (a multiple of the group's scale): the nearest non-negative value by
// code, ties to the even code, the sign in bit 3 -- the host's comparisons exactly.
__device__ __forceinline__ uint32_t E2m1(float v) {
  constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = fabsf(v);
  int best = 0;
#pragma unroll
  for (int c = 1; c < 8; ++c) {
    const float d = fabsf(a - kValues[c]), db = fabsf(a - kValues[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return static_cast<uint32_t>(best | (signbit(v) ? 8 : 0));
}

__global__ void __launch_bounds__(kThreads) QuantizeMxfp4Kernel(const QuantizeMxfp4Params p) {
  const int64_t groups_per_row = p.cols / kGroup;
  const int64_t total = p.rows * groups_per_row;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = g / groups_per_row, b = g % groups_per_row;
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.w) + r * p.cols + b * kGroup);
    float x[kGroup];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = src[q];
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        x[q * 8 + 2 * k] = __uint_as_float(words[k] << 16);
        x[q * 8 + 2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
      }
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const float a = fabsf(x[i]);
      amax = amax < a ? a : amax;  // std::max: a NaN leaves amax as it is
    }
    amax = fminf(amax, 3.402823466e38f);  // an infinite input scales as the largest finite (the host's rule)
    const int exponent = CeilLog2(fmax(static_cast<double>(amax), 1e-4) / 6.0);
    const int biased = min(max(exponent + 127, 0), 254);
    p.scales[g] = static_cast<uint8_t>(biased);
    const float inv = ldexpf(1.0f, -(biased - 127));
    uint32_t packed[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) word |= E2m1(x[w * 8 + k] * inv) << (4 * k);
      packed[w] = word;
    }
    *reinterpret_cast<uint4*>(p.codes + r * (p.cols / 2) + b * (kGroup / 2)) =
        make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

}  // namespace

cudaError_t LaunchQuantizeMxfp4(const QuantizeMxfp4Params& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0 || p.cols % kGroup != 0) return cudaErrorInvalidValue;
  const int64_t total = p.rows * (p.cols / kGroup);
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  QuantizeMxfp4Kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace peregrine::kernels
