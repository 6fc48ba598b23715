#include "kernels/token_bitmask.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;  // consecutive logits per thread: one float4 store when aligned
constexpr int64_t kChunk = kThreads * kPerThread;

// Grid (chunks of the row, rows). A thread owns kPerThread consecutive ids, so a warp's
// stores are contiguous; the 32-bit word they test comes through L1 (one word serves 8
// threads). A CTA whose row has no mask returns after one load.
__global__ void __launch_bounds__(kThreads) ApplyTokenBitmaskKernel(const TokenBitmaskParams p) {
  StartAfterPredecessor();
  const int64_t row = blockIdx.y;
  const int32_t m = p.row_mask[row];
  if (m < 0 || m >= p.num_masks) return;
  const uint32_t* mask = p.masks + static_cast<int64_t>(m) * p.words;
  float* logits = p.logits + row * p.vocab;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x * kPerThread;
  if (first >= p.vocab) return;
  const uint32_t bits = mask[first / 32] >> (first % 32);
  if ((bits & 0xFu) == 0xFu) return;  // all four allowed
  const float masked = -__int_as_float(0x7f800000);
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t id = first + k;
    if (id < p.vocab && ((bits >> k) & 1u) == 0) logits[id] = masked;
  }
}

}  // namespace

cudaError_t LaunchApplyTokenBitmask(const TokenBitmaskParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.vocab <= 0 || p.num_masks <= 0) return cudaSuccess;
  if (p.rows > 65535 || p.words * 32 < p.vocab) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.vocab + kChunk - 1) / kChunk), static_cast<unsigned>(p.rows));
  return LaunchDependent(ApplyTokenBitmaskKernel, LaunchShape{grid, dim3(kThreads)}, stream, p);
}

}  // namespace peregrine::kernels
