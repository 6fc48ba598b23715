#include "kernels/indexer_scores.cuh"

#include <array>

#include "kernels/common/mma.cuh"
#include "kernels/common/page_table.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;

// Tiling of one chunk of kIndexerChunk keys: the padded heads are split into 16-row MMA
// tiles across warps; warps left over split the chunk's keys. Each warp keeps its query
// rows in registers for as long as the CTA stays on one request.
template <int kHeads, int kDim>
struct Tiling {
  static constexpr int kHeadsPadded = kHeads < 16 ? 16 : kHeads;
  static constexpr int kMTiles = kHeadsPadded / 16;
  static constexpr int kWarpsM = kMTiles;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kKeysPerWarp = kIndexerChunk / kWarpsN;
  static constexpr int kNTiles = kKeysPerWarp / 8;
  static constexpr int kKSteps = kDim / 16;
  static constexpr int kChunksPerRow = kDim / 8;  // 16-byte chunks per key row
  static_assert(kHeadsPadded % 16 == 0 && kWarps % kWarpsM == 0, "heads must tile over the warps");
  static_assert(kNTiles % 2 == 0, "keys are loaded two MMA tiles at a time");
  static_assert(kDim % 64 == 0, "key rows must be swizzle-able (>= 128 bytes)");
};

// Advances `b` to the request that owns global chunk `g` (prefix[b] <= g < prefix[b + 1]).
__device__ __forceinline__ int Advance(const int* prefix, int b, int g) {
  while (prefix[b + 1] <= g) ++b;
  return b;
}

template <int kHeads, int kDim>
__global__ void __launch_bounds__(kThreads) IndexerScoresKernel(const IndexerScoresParams p) {
  StartAfterPredecessor();
  using T = Tiling<kHeads, kDim>;
  __shared__ alignas(128) __nv_bfloat16 key_s[2][kIndexerChunk * kDim];
  __shared__ const __nv_bfloat16* row_src[2][kIndexerChunk];
  __shared__ float partial[T::kWarpsM][kIndexerChunk];
  __shared__ int chunk_prefix[kIndexerMaxBatch + 1];
  __shared__ int entries[kIndexerMaxBatch];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g4 = lane / 4;
  const int t4 = lane % 4;
  const int wm = warp % T::kWarpsM;
  const int wn = warp / T::kWarpsM;

  // Chunks per request from the real lengths, prefix-summed by one warp.
  const int64_t limit64 = static_cast<int64_t>(p.max_pages) * p.page_size;
  const int limit = static_cast<int>(limit64 < p.score_stride ? limit64 : p.score_stride);
  if (warp == 0) {
    int running = 0;
    for (int base = 0; base < p.batch; base += kWarpSize) {
      const int b = base + lane;
      int n = b < p.batch ? p.num_entries[b] : 0;
      n = n < 0 ? 0 : (n > limit ? limit : n);
      int inclusive = (n + kIndexerChunk - 1) / kIndexerChunk;
#pragma unroll
      for (int offset = 1; offset < kWarpSize; offset <<= 1) {
        const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
      }
      if (b < p.batch) {
        chunk_prefix[b + 1] = running + inclusive;
        entries[b] = n;
      }
      running += __shfl_sync(0xffffffffu, inclusive, kWarpSize - 1);
    }
    if (lane == 0) chunk_prefix[0] = 0;
  }
  __syncthreads();

  // An even share of the batch's chunks, contiguous so a CTA rarely changes request.
  const int total = chunk_prefix[p.batch];
  const int per_cta = (total + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int begin = static_cast<int>(blockIdx.x) * per_cta;
  const int end = begin + per_cta < total ? begin + per_cta : total;
  if (begin >= end) return;

  auto resolve = [&](int g, int b, int buf) {
    if (tid < kIndexerChunk) {
      const int k = (g - chunk_prefix[b]) * kIndexerChunk + tid;
      const __nv_bfloat16* src = nullptr;
      if (k < entries[b]) {
        const int staged = StagedRow(p.staged, b, k);
        if (staged >= 0) {
          src = static_cast<const __nv_bfloat16*>(p.staged.data) + static_cast<int64_t>(staged) * kDim;
        } else if (staged == -1) {
          const int32_t* table = PageTableRow(p.page_table, p.page_table_rows, p.num_page_tables, p.max_pages, b);
          const int page = table != nullptr ? table[k / p.page_size] : -1;
          const int64_t row = static_cast<int64_t>(page) * p.page_size + k % p.page_size;
          if (page >= 0 && row < p.num_key_rows) src = p.keys + row * kDim;
        }
      }
      row_src[buf][tid] = src;
    }
  };
  auto issue = [&](int buf) {
    for (int i = tid; i < kIndexerChunk * T::kChunksPerRow; i += kThreads) {
      const int r = i / T::kChunksPerRow;
      const int c = i % T::kChunksPerRow;
      const __nv_bfloat16* src = row_src[buf][r];
      CpAsync16(&key_s[buf][SwizzledChunk<T::kChunksPerRow>(r, c) * 8], src != nullptr ? src + c * 8 : p.keys,
                src != nullptr);
    }
  };

  int resolve_b = Advance(chunk_prefix, 0, begin);
  resolve(begin, resolve_b, 0);
  __syncthreads();
  issue(0);
  CpAsyncCommit();

  int compute_b = resolve_b;
  int loaded_b = -1;
  uint32_t qa[T::kKSteps][4];
  float w_lo = 0.0f;
  float w_hi = 0.0f;
  const int h_lo = wm * 16 + g4;
  const int h_hi = h_lo + 8;

  for (int g = begin; g < end; ++g) {
    const int buf = (g - begin) & 1;
    if (g + 1 < end) {
      resolve_b = Advance(chunk_prefix, resolve_b, g + 1);
      resolve(g + 1, resolve_b, buf ^ 1);
    }
    __syncthreads();
    if (g + 1 < end) issue(buf ^ 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();

    compute_b = Advance(chunk_prefix, compute_b, g);
    if (compute_b != loaded_b) {
      loaded_b = compute_b;
      const __nv_bfloat16* q = p.q + static_cast<int64_t>(compute_b) * kHeads * kDim;
#pragma unroll
      for (int ks = 0; ks < T::kKSteps; ++ks) {
        const int k0 = ks * 16 + 2 * t4;
        qa[ks][0] = h_lo < kHeads ? *reinterpret_cast<const uint32_t*>(q + h_lo * kDim + k0) : 0u;
        qa[ks][1] = h_hi < kHeads ? *reinterpret_cast<const uint32_t*>(q + h_hi * kDim + k0) : 0u;
        qa[ks][2] = h_lo < kHeads ? *reinterpret_cast<const uint32_t*>(q + h_lo * kDim + k0 + 8) : 0u;
        qa[ks][3] = h_hi < kHeads ? *reinterpret_cast<const uint32_t*>(q + h_hi * kDim + k0 + 8) : 0u;
      }
      const float* w = p.weights + static_cast<int64_t>(compute_b) * kHeads;
      w_lo = h_lo < kHeads ? w[h_lo] * p.scale : 0.0f;
      w_hi = h_hi < kHeads ? w[h_hi] * p.scale : 0.0f;
    }

    float s[T::kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    const __nv_bfloat16* tile = key_s[buf];
    const int j = lane / 8;
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < T::kNTiles / 2; ++np) {
        const int row = wn * T::kKeysPerWarp + np * 16 + (j / 2) * 8 + lane % 8;
        uint32_t bk[4];
        LdMatrixX4(bk, tile + SwizzledChunk<T::kChunksPerRow>(row, 2 * ks + (j % 2)) * 8);
        MmaBF16(s[2 * np], qa[ks], bk[0], bk[1]);
        MmaBF16(s[2 * np + 1], qa[ks], bk[2], bk[3]);
      }
    }

    const int key_base = (g - chunk_prefix[compute_b]) * kIndexerChunk;
    const int n = entries[compute_b];
    float* scores = p.scores + static_cast<int64_t>(compute_b) * p.score_stride;
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt) {
      float v0 = w_lo * fmaxf(s[nt][0], 0.0f) + w_hi * fmaxf(s[nt][2], 0.0f);
      float v1 = w_lo * fmaxf(s[nt][1], 0.0f) + w_hi * fmaxf(s[nt][3], 0.0f);
#pragma unroll
      for (int offset = 4; offset < kWarpSize; offset <<= 1) {
        v0 += __shfl_xor_sync(0xffffffffu, v0, offset);
        v1 += __shfl_xor_sync(0xffffffffu, v1, offset);
      }
      const int local = wn * T::kKeysPerWarp + nt * 8 + 2 * t4;
      if (g4 == 0) {
        if constexpr (T::kWarpsM == 1) {
          if (key_base + local < n) scores[key_base + local] = v0;
          if (key_base + local + 1 < n) scores[key_base + local + 1] = v1;
        } else {
          partial[wm][local] = v0;
          partial[wm][local + 1] = v1;
        }
      }
    }
    if constexpr (T::kWarpsM > 1) {
      __syncthreads();
      if (tid < kIndexerChunk && key_base + tid < n) {
        float v = 0.0f;
#pragma unroll
        for (int m = 0; m < T::kWarpsM; ++m) v += partial[m][tid];
        scores[key_base + tid] = v;
      }
    }
  }
}

template <int kHeads, int kDim>
cudaError_t LaunchConfig(const IndexerScoresParams& p, cudaStream_t stream) {
  return LaunchDependent(IndexerScoresKernel<kHeads, kDim>, LaunchShape{dim3(static_cast<unsigned>(p.num_ctas)), dim3(kThreads)}, stream, p);
}

}  // namespace

cudaError_t LaunchIndexerScores(const IndexerScoresParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.batch > kIndexerMaxBatch || p.num_ctas <= 0) return cudaErrorInvalidValue;
  constexpr auto c0 = kIndexerScoresConfigs[0];
  constexpr auto c1 = kIndexerScoresConfigs[1];
  static_assert(std::size(kIndexerScoresConfigs) == 2);
  if (p.heads == c0.heads && p.dim == c0.dim) return LaunchConfig<c0.heads, c0.dim>(p, stream);
  if (p.heads == c1.heads && p.dim == c1.dim) return LaunchConfig<c1.heads, c1.dim>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace peregrine::kernels
