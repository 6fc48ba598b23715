#include "kernels/embedding.cuh"
#include "kernels/common/dependent_launch.cuh"

#include <cuda_bf16.h>

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;

// One thread per 8 columns of a token: one 16-byte read of the table, hc x 32 bytes written.
__global__ void __launch_bounds__(kThreads) EmbeddingKernel(const EmbeddingParams p) {
  StartAfterPredecessor();
  const int64_t per_token = p.dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= p.num_tokens * per_token) return;
  const int64_t t = idx / per_token;
  const int64_t e = (idx % per_token) * 8;
  const int64_t id = p.token_ids[t];
  float4 v[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
  if (id >= 0 && id < p.vocab_size) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.table) + id * p.dim + e));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    const float2 c = __bfloat1622float2(h[2]), d = __bfloat1622float2(h[3]);
    v[0] = make_float4(a.x, a.y, b.x, b.y);
    v[1] = make_float4(c.x, c.y, d.x, d.y);
  }
  float* out = p.streams + t * p.hc * p.dim + e;
  for (int i = 0; i < p.hc; ++i) {
    reinterpret_cast<float4*>(out + i * p.dim)[0] = v[0];
    reinterpret_cast<float4*>(out + i * p.dim)[1] = v[1];
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.hc < 1 || p.dim <= 0 || p.dim % 8 != 0) return cudaErrorInvalidValue;
  const int64_t blocks = (p.num_tokens * (p.dim / 8) + kThreads - 1) / kThreads;
  if (blocks > (int64_t{1} << 31) - 1) return cudaErrorInvalidValue;
  return LaunchDependent(EmbeddingKernel, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads)}, stream, p);
}

}  // namespace peregrine::kernels
