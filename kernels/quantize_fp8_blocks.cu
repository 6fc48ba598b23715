#include "kernels/quantize_fp8_blocks.cuh"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/quantize_fp8.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kBlock = 128;
constexpr int kThreads = 256;

// The smallest power of two s with amax <= 448 s (amax floored at 1e-4), from the exponent
// bits: no log2 rounding to worry about.
__device__ __forceinline__ float BlockScale(float amax) {
  const float ratio = __fdiv_rn(fmaxf(amax, kFp8ActAmaxFloor), kFp8E4M3Max);
  const uint32_t bits = __float_as_uint(ratio);
  const uint32_t exp_bits = bits & 0x7f800000u;
  float s = __uint_as_float((bits & 0x007fffffu) != 0 ? exp_bits + 0x00800000u : exp_bits);
  // The division rounded: if it rounded down onto a power of two, s may be one binade short.
  if (fmaxf(amax, kFp8ActAmaxFloor) > kFp8E4M3Max * s) s *= 2.0f;
  return s;
}

__global__ void __launch_bounds__(kThreads) QuantizeFp8BlocksKernel(const QuantizeFp8BlocksParams p) {
  __shared__ float warp_max[kThreads / 32];
  __shared__ float block_scale;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlock, c0 = static_cast<int64_t>(blockIdx.x) * kBlock;
  const int64_t rows = p.rows - r0 < kBlock ? p.rows - r0 : kBlock;
  const int64_t cols = p.cols - c0 < kBlock ? p.cols - c0 : kBlock;
  const auto* w = static_cast<const __nv_bfloat16*>(p.w);
  float amax = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < kBlock * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (r < rows && c < cols) amax = fmaxf(amax, fabsf(__bfloat162float(w[(r0 + r) * p.cols + c0 + c])));
  }
  for (int mask = 16; mask > 0; mask >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (float v : warp_max) m = fmaxf(m, v);
    block_scale = BlockScale(m);
    p.scale[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = block_scale;
  }
  __syncthreads();
  const float s = block_scale;
  for (int i = static_cast<int>(threadIdx.x); i < kBlock * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (r >= rows || c >= cols) continue;
    const int64_t at = (r0 + r) * p.cols + c0 + c;
    p.q[at] = static_cast<uint8_t>(
        __nv_cvt_float_to_fp8(__fdiv_rn(__bfloat162float(w[at]), s), __NV_SATFINITE, __NV_E4M3));
  }
}

}  // namespace

cudaError_t LaunchQuantizeFp8Blocks(const QuantizeFp8BlocksParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  const int64_t grid_x = (p.cols + kBlock - 1) / kBlock, grid_y = (p.rows + kBlock - 1) / kBlock;
  if (grid_x > INT32_MAX || grid_y > 65535) return cudaErrorInvalidValue;
  QuantizeFp8BlocksKernel<<<dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), kThreads, 0,
                            stream>>>(p);
  return cudaGetLastError();
}

}  // namespace peregrine::kernels
