#include "kernels/random_fill.cuh"

#include <cuda_bf16.h>

#include <algorithm>

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 4096;

// SplitMix64 finaliser: a bijective mix, good enough to decorrelate neighbouring indices.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ float Unit(uint64_t seed, int64_t i) {
  const uint64_t r = Mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // 24 bits -> [0, 1)
}

__global__ void __launch_bounds__(kThreads) RandomFillKernel(const RandomFillParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.n; i += stride) {
    const float u = Unit(p.seed, i);
    if (p.kind == RandomFillKind::kBytes) {
      const int lo = static_cast<int>(p.lo);
      const int span = static_cast<int>(p.hi) - lo + 1;
      static_cast<uint8_t*>(p.data)[i] = static_cast<uint8_t>(lo + min(static_cast<int>(u * span), span - 1));
    } else {
      const float v = p.lo + (p.hi - p.lo) * u;
      if (p.type == ElementType::kBF16) {
        static_cast<__nv_bfloat16*>(p.data)[i] = __float2bfloat16(v);
      } else {
        static_cast<float*>(p.data)[i] = v;
      }
    }
  }
}

}  // namespace

cudaError_t LaunchRandomFill(const RandomFillParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.kind == RandomFillKind::kBytes && (p.lo < 0.0f || p.hi > 255.0f || p.lo > p.hi)) return cudaErrorInvalidValue;
  const int64_t blocks = std::min<int64_t>(kBlocks, (p.n + kThreads - 1) / kThreads);
  RandomFillKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace peregrine::kernels
