#include "kernels/rope.cuh"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/rope_pair.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;

// One thread per rotated pair; consecutive threads take consecutive pairs of a row.
template <typename T>
__global__ void __launch_bounds__(kThreads) RopeKernel(const RopeParams p) {
  StartAfterPredecessor();
  const int half = p.rope_dim / 2;
  const int64_t total = p.rows * half;
  const float sign = p.inverse ? -1.0f : 1.0f;
  T* x = static_cast<T*>(p.x);
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = idx / half;
    const int i = static_cast<int>(idx % half);
    const int pos = p.positions[row / p.rows_per_position];
    if (pos < 0 || pos >= p.num_positions) continue;
    const float c = p.cos[static_cast<int64_t>(pos) * half + i];
    const float s = sign * p.sin[static_cast<int64_t>(pos) * half + i];
    T* pair = x + row * p.n + (p.n - p.rope_dim) + 2 * i;
    const float2 r = RotatePair(ToFloat(pair[0]), ToFloat(pair[1]), c, s);
    pair[0] = FromFloat<T>(r.x);
    pair[1] = FromFloat<T>(r.y);
  }
}

}  // namespace

cudaError_t LaunchRope(const RopeParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.rope_dim == 0) return cudaSuccess;
  const int64_t total = p.rows * (p.rope_dim / 2);
  // Enough blocks to fill any current GPU several times; the loop covers the rest.
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65536);
  const LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads)};
  if (p.type == ElementType::kBF16) return LaunchDependent(RopeKernel<__nv_bfloat16>, shape, stream, p);
  return LaunchDependent(RopeKernel<float>, shape, stream, p);
}

}  // namespace peregrine::kernels
