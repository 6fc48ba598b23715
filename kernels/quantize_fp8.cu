#include "kernels/quantize_fp8.cuh"
#include "kernels/common/dependent_launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace peregrine::kernels {

namespace {

constexpr int kBlockThreads = 256;
constexpr int kElemsPerThread = 8;                                 // one 16-byte load of bf16
constexpr int kThreadsPerGroup = kFp8GroupSize / kElemsPerThread;  // 16: half a warp
static_assert(32 % kThreadsPerGroup == 0, "a group's threads must share a warp");

// The scale of a group whose largest magnitude is `amax`; both divisions are IEEE (the
// kernels are built without fast math) so the host reference gets the same bits.
__device__ __forceinline__ float GroupScale(float amax, bool pow2) {
  float s = __fdiv_rn(fmaxf(amax, kFp8ActAmaxFloor), kFp8E4M3Max);
  if (pow2) {
    // Round up to a power of two: drop the mantissa, bump the exponent if it was not zero.
    // s is a positive normal float here (>= 1e-4 / 448), so no subnormal or overflow case.
    const uint32_t bits = __float_as_uint(s);
    const uint32_t exp_bits = bits & 0x7f800000u;
    s = __uint_as_float((bits & 0x007fffffu) != 0 ? exp_bits + 0x00800000u : exp_bits);
  }
  return s;
}

__global__ void __launch_bounds__(kBlockThreads) QuantizeFp8Kernel(const QuantizeFp8Params p) {
  StartAfterPredecessor();
  const int64_t groups_per_row = p.k / kFp8GroupSize;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x;
  const int64_t group = thread / kThreadsPerGroup;
  const int part = static_cast<int>(thread % kThreadsPerGroup);
  // Threads past the end still take part in the shuffles (full-warp masks) but touch nothing.
  const bool active = group < p.rows * groups_per_row;
  const int64_t row = active ? group / groups_per_row : 0;
  const int64_t g = active ? group % groups_per_row : 0;
  const int64_t offset = row * p.k + g * kFp8GroupSize + part * kElemsPerThread;

  float v[kElemsPerThread] = {};
  if (active) {
    const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.x) + offset);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < kElemsPerThread / 2; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kElemsPerThread; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int mask = kThreadsPerGroup / 2; mask > 0; mask >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
  }
  if (!active) return;

  const float s = GroupScale(amax, p.pow2_scales);
  uint32_t packed[kElemsPerThread / 4];
#pragma unroll
  for (int i = 0; i < kElemsPerThread / 4; ++i) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(v[4 * i], s), __fdiv_rn(v[4 * i + 1], s)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(v[4 * i + 2], s), __fdiv_rn(v[4 * i + 3], s)), __NV_SATFINITE, __NV_E4M3);
    packed[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  *reinterpret_cast<uint2*>(p.x_q + offset) = make_uint2(packed[0], packed[1]);
  if (part == 0) p.scale[row * p.scale_row_stride + g * p.scale_group_stride] = s;
}

}  // namespace

cudaError_t LaunchQuantizeFp8(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.k <= 0 || p.k % kFp8GroupSize != 0) return cudaErrorInvalidValue;
  const int64_t threads = p.rows * (p.k / kFp8GroupSize) * kThreadsPerGroup;
  const int64_t blocks = (threads + kBlockThreads - 1) / kBlockThreads;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchDependent(QuantizeFp8Kernel, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kBlockThreads)}, stream, p);
}

}  // namespace peregrine::kernels
