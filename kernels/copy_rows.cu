#include "kernels/copy_rows.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 128;

// One CTA per pair; 16-byte words strided over the threads.
__global__ void __launch_bounds__(kThreads) CopyRowsKernel(const CopyRowsParams p) {
  StartAfterPredecessor();
  const int64_t i = blockIdx.x;
  const int32_t s = p.src_rows[i];
  const int32_t d = p.dst_rows[i];
  if (s < 0 || d < 0 || s >= p.num_src_rows || d >= p.num_dst_rows) return;
  const int64_t words = p.row_bytes / 16;
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const char*>(p.src) + s * p.row_bytes);
  uint4* dst = reinterpret_cast<uint4*>(static_cast<char*>(p.dst) + d * p.row_bytes);
  for (int64_t w = threadIdx.x; w < words; w += kThreads) dst[w] = src[w];
}

}  // namespace

cudaError_t LaunchCopyRows(const CopyRowsParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.row_bytes <= 0 || p.row_bytes % 16 != 0 || p.n > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchDependent(CopyRowsKernel, LaunchShape{dim3(static_cast<unsigned>(p.n)), dim3(kThreads)}, stream, p);
}

}  // namespace peregrine::kernels
