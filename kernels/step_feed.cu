#include "kernels/step_feed.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kFeedThreads = 128;
constexpr int kCopyThreads = 256;
constexpr int64_t kCopyChunk = 8192;  // floats per CTA

__global__ void __launch_bounds__(kFeedThreads) FeedTokensKernel(const FeedTokensParams p) {
  StartAfterPredecessor();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kFeedThreads + threadIdx.x;
  if (i >= p.n) return;
  const int32_t row = p.feeds[2 * i];
  const int32_t index = p.feeds[2 * i + 1];
  if (row < 0 || row >= p.num_rows || index < 0 || index >= p.num_sampled) return;
  const int32_t token = p.sampled[index];
  p.token_ids[row] = token < 0 ? 0 : token;
}

// Grid (chunks of the row, rows): a CTA whose row is not flagged returns after one load.
__global__ void __launch_bounds__(kCopyThreads) CopyFlaggedRowsKernel(const CopyFlaggedRowsParams p) {
  StartAfterPredecessor();
  const int64_t row = blockIdx.y;
  if (p.flags[row] == 0) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kCopyChunk;
  const int64_t end = begin + kCopyChunk < p.width ? begin + kCopyChunk : p.width;
  const float* src = p.src + row * p.width;
  float* dst = p.dst + row * p.width;
  for (int64_t c = begin + threadIdx.x; c < end; c += kCopyThreads) dst[c] = src[c];
}

constexpr int kCountThreads = 256;

__global__ void __launch_bounds__(kCountThreads) CountLogitsAboveKernel(const CountLogitsAboveParams p) {
  StartAfterPredecessor();
  const int64_t i = blockIdx.x;
  const int32_t row = p.rows[i];
  const int32_t token = p.tokens[i];
  if (row < 0 || row >= p.num_rows || token < 0 || token >= p.width) {
    if (threadIdx.x == 0) p.counts[i] = -1;
    return;
  }
  const float* x = p.logits + static_cast<int64_t>(row) * p.width;
  float own = x[token];
  if (isnan(own)) own = -INFINITY;
  int count = 0;
  for (int64_t c = threadIdx.x; c < p.width; c += kCountThreads) count += x[c] > own ? 1 : 0;
  for (int offset = 16; offset > 0; offset /= 2) count += __shfl_down_sync(0xffffffffu, count, offset);
  __shared__ int warp_counts[kCountThreads / 32];
  if (threadIdx.x % 32 == 0) warp_counts[threadIdx.x / 32] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int w = 0; w < kCountThreads / 32; ++w) total += warp_counts[w];
    p.counts[i] = total;
  }
}

}  // namespace

cudaError_t LaunchCountLogitsAbove(const CountLogitsAboveParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.n > INT32_MAX || p.width > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchDependent(CountLogitsAboveKernel, LaunchShape{dim3(static_cast<unsigned>(p.n)), dim3(kCountThreads)}, stream, p);
}

cudaError_t LaunchFeedTokens(const FeedTokensParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.n > INT32_MAX) return cudaErrorInvalidValue;
  const auto blocks = static_cast<unsigned>((p.n + kFeedThreads - 1) / kFeedThreads);
  return LaunchDependent(FeedTokensKernel, LaunchShape{dim3(blocks), dim3(kFeedThreads)}, stream, p);
}

cudaError_t LaunchCopyFlaggedRows(const CopyFlaggedRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.width <= 0) return cudaSuccess;
  if (p.rows > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.width + kCopyChunk - 1) / kCopyChunk), static_cast<unsigned>(p.rows));
  return LaunchDependent(CopyFlaggedRowsKernel, LaunchShape{grid, dim3(kCopyThreads)}, stream, p);
}

}  // namespace peregrine::kernels
