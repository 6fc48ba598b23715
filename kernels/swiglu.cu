#include "kernels/swiglu.cuh"

#include <cuda_bf16.h>

#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float SwigluOne(float g, float u, float limit) {
  if (limit > 0.0f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  return g / (1.0f + expf(-g)) * u;
}

// kVec columns per thread: 8 (16-byte accesses) when I is a multiple of 8, else 1.
template <int kVec>
__global__ void __launch_bounds__(kThreads) SwigluKernel(const SwigluParams p) {
  StartAfterPredecessor();
  const int64_t per_token = p.inter / kVec;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= p.num_tokens * per_token) return;
  const int64_t t = idx / per_token;
  const int64_t c = (idx % per_token) * kVec;
  const __nv_bfloat16* gate = static_cast<const __nv_bfloat16*>(p.gate_up) + t * 2 * p.inter + c;
  const __nv_bfloat16* up = gate + p.inter;
  __nv_bfloat16* h = static_cast<__nv_bfloat16*>(p.h) + t * p.inter + c;
  if constexpr (kVec == 8) {
    const uint4 g_raw = __ldg(reinterpret_cast<const uint4*>(gate));
    const uint4 u_raw = __ldg(reinterpret_cast<const uint4*>(up));
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g_raw);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&u_raw);
    uint32_t out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 g = __bfloat1622float2(g2[i]);
      const float2 u = __bfloat1622float2(u2[i]);
      out[i] = PackBF16x2(SwigluOne(g.x, u.x, p.limit), SwigluOne(g.y, u.y, p.limit));
    }
    *reinterpret_cast<uint4*>(h) = make_uint4(out[0], out[1], out[2], out[3]);
  } else {
    *h = __float2bfloat16_rn(SwigluOne(__bfloat162float(*gate), __bfloat162float(*up), p.limit));
  }
}

template <int kVec>
cudaError_t LaunchVec(const SwigluParams& p, cudaStream_t stream) {
  const int64_t blocks = (p.num_tokens * (p.inter / kVec) + kThreads - 1) / kThreads;
  if (blocks > (int64_t{1} << 31) - 1) return cudaErrorInvalidValue;
  return LaunchDependent(SwigluKernel<kVec>, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads)}, stream, p);
}

}  // namespace

cudaError_t LaunchSwiglu(const SwigluParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0 || p.inter <= 0) return cudaSuccess;
  return p.inter % 8 == 0 ? LaunchVec<8>(p, stream) : LaunchVec<1>(p, stream);
}

}  // namespace peregrine::kernels
