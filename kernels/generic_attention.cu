#include "kernels/generic_attention.cuh"

#include <cuda_bf16.h>

#include <cstddef>
#include <iterator>

#include "kernels/common/kv_fp8_load.cuh"
#include "kernels/common/page_table.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kAttentionThreads = kGenericAttentionWarps * kWarpSize;
constexpr int kIndexerThreads = kGenericIndexerWarps * kWarpSize;

// bf16 bits to fp32 (exact): the low and the high half of a 32-bit word.
__device__ __forceinline__ float LowBF16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float HighBF16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// kVector bf16 values at `src` (aligned to 2 * kVector bytes) as kVector / 2 raw words.
template <int kVector>
__device__ __forceinline__ void LoadWords(const __nv_bfloat16* src, uint32_t (&w)[kVector / 2]) {
  if constexpr (kVector == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    w[0] = raw.x;
    w[1] = raw.y;
    w[2] = raw.z;
    w[3] = raw.w;
  } else {
    static_assert(kVector == 2, "vector widths 8 and 2");
    w[0] = *reinterpret_cast<const uint32_t*>(src);
  }
}

// Row r of request b's list (window rows first, then compressed entries), or null when the
// row is masked; the same rules as cpu::SparseAttentionDecode and the fast kernel. An FP8
// entry comes back tagged (kernels/common/kv_fp8_load.cuh).
__device__ __forceinline__ const void* KvRow(const SparseAttentionParams& p, int b, int window_length, int64_t r) {
  if (r < window_length) {
    const int idx = p.window_indices[static_cast<int64_t>(b) * p.window_capacity + r];
    return idx >= 0 && idx < p.num_window_rows ? p.window_kv + static_cast<int64_t>(idx) * p.head_dim : nullptr;
  }
  const int64_t c = r - window_length;
  const int64_t e = p.compressed_indices != nullptr
                        ? p.compressed_indices[static_cast<int64_t>(b) * p.compressed_capacity + c]
                        : c;
  if (e < 0) return nullptr;
  const int64_t row_bytes = p.entries_fp8 ? KvFp8RowLayout{p.head_dim, p.entry_rope_dim}.row_bytes()
                                          : static_cast<int64_t>(p.head_dim) * 2;
  auto entry = [&](const void* base, int64_t row) -> const void* {
    const uint8_t* at = static_cast<const uint8_t*>(base) + row * row_bytes;
    return p.entries_fp8 ? TagFp8Row(at) : static_cast<const void*>(at);
  };
  const int staged = StagedRow(p.staged, b, e);
  if (staged != -1) return staged >= 0 ? entry(p.staged.data, staged) : nullptr;
  if (e / p.page_size >= p.max_pages) return nullptr;
  const int32_t* table = PageTableRow(p.page_table, p.page_table_rows, p.num_page_tables, p.max_pages, b);
  const int page = table != nullptr ? table[e / p.page_size] : -1;
  const int64_t row = static_cast<int64_t>(page) * p.page_size + e % p.page_size;
  return page >= 0 && row < p.num_compressed_rows ? entry(p.compressed_kv, row) : nullptr;
}

// kVector values of a row from dim d0 as bf16x2 words: a bf16 row's own, an FP8 row's
// dequantised.
template <int kVector>
__device__ __forceinline__ void LoadRowWords(const SparseAttentionParams& p, const void* row, int d0,
                                             uint32_t (&w)[kVector / 2]) {
  if (!IsFp8Row(row)) {
    LoadWords<kVector>(static_cast<const __nv_bfloat16*>(row) + d0, w);
    return;
  }
  const KvFp8RowLayout layout{p.head_dim, p.entry_rope_dim};
  if constexpr (kVector == 8) {
    const uint4 chunk = Fp8RowChunk(Fp8RowBytes(row), layout, d0);
    w[0] = chunk.x;
    w[1] = chunk.y;
    w[2] = chunk.z;
    w[3] = chunk.w;
  } else {
    w[0] = Fp8RowPair(Fp8RowBytes(row), layout, d0);
  }
}

// One CTA per (request b, head h). Lane l of a warp owns dims (i * 32 + l) * kVector + j of
// every row (i < kIterations, j < kVector); warp w takes rows w, w + kWarps, ... two at a
// time, so that two rows' loads are in flight together.
template <int kVector, int kIterations>
__global__ void __launch_bounds__(kAttentionThreads) SparseAttentionGenericKernel(const SparseAttentionParams p) {
  StartAfterPredecessor();
  constexpr int kWarps = kGenericAttentionWarps;
  constexpr int kSpan = kWarpSize * kVector * kIterations;
  constexpr int kWords = kVector / 2;
  __shared__ float o_s[kWarps][kSpan];
  __shared__ float m_s[kWarps];
  __shared__ float l_s[kWarps];

  const int b = static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int dim = p.head_dim;

  // This lane's slice of q, scaled so that scores come out in log2 units.
  const float q_scale = p.scale * kLog2e;
  const __nv_bfloat16* q_row = p.q + (static_cast<int64_t>(b) * p.heads + h) * dim;
  float q[kIterations][kVector];
#pragma unroll
  for (int i = 0; i < kIterations; ++i) {
    const int d0 = (i * kWarpSize + lane) * kVector;
    uint32_t w[kWords] = {};
    if (d0 < dim) LoadWords<kVector>(q_row + d0, w);
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      q[i][2 * j] = LowBF16(w[j]) * q_scale;
      q[i][2 * j + 1] = HighBF16(w[j]) * q_scale;
    }
  }

  int window_length = p.window_lengths[b];
  window_length = window_length < 0 ? 0 : (window_length > p.window_capacity ? p.window_capacity : window_length);
  int64_t compressed_length = 0;
  if (p.compressed_kv != nullptr) {
    const int64_t capacity = p.compressed_indices != nullptr ? static_cast<int64_t>(p.compressed_capacity)
                                                              : static_cast<int64_t>(p.max_pages) * p.page_size;
    const int64_t n = p.compressed_lengths[b];
    compressed_length = n < 0 ? 0 : (n > capacity ? capacity : n);
  }
  const int64_t total = window_length + compressed_length;

  // Online softmax of this warp's rows (every lane holds the same m and l).
  float m = -INFINITY;
  float l = 0.0f;
  float o[kIterations][kVector];
#pragma unroll
  for (int i = 0; i < kIterations; ++i)
#pragma unroll
    for (int j = 0; j < kVector; ++j) o[i][j] = 0.0f;

  for (int64_t r0 = warp; r0 < total; r0 += 2 * kWarps) {
    const void* src[2];
    src[0] = KvRow(p, b, window_length, r0);
    src[1] = r0 + kWarps < total ? KvRow(p, b, window_length, r0 + kWarps) : nullptr;
    uint32_t v[2][kIterations][kWords];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int i = 0; i < kIterations; ++i) {
        const int d0 = (i * kWarpSize + lane) * kVector;
#pragma unroll
        for (int j = 0; j < kWords; ++j) v[u][i][j] = 0u;
        if (src[u] != nullptr && d0 < dim) LoadRowWords<kVector>(p, src[u], d0, v[u][i]);
      }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (src[u] == nullptr) continue;  // uniform over the warp
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kIterations; ++i)
#pragma unroll
        for (int j = 0; j < kWords; ++j) {
          s = fmaf(q[i][2 * j], LowBF16(v[u][i][j]), s);
          s = fmaf(q[i][2 * j + 1], HighBF16(v[u][i][j]), s);
        }
      s = WarpSum(s);
      const float m_new = fmaxf(m, s);
      const float correction = exp2f(m - m_new);
      const float weight = exp2f(s - m_new);
      l = l * correction + weight;
#pragma unroll
      for (int i = 0; i < kIterations; ++i)
#pragma unroll
        for (int j = 0; j < kWords; ++j) {
          o[i][2 * j] = fmaf(weight, LowBF16(v[u][i][j]), o[i][2 * j] * correction);
          o[i][2 * j + 1] = fmaf(weight, HighBF16(v[u][i][j]), o[i][2 * j + 1] * correction);
        }
      m = m_new;
    }
  }

  // Merge the warps with the sink: a warp without rows has m = -inf and l = 0.
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kIterations; ++i)
#pragma unroll
    for (int j = 0; j < kVector; ++j) o_s[warp][(i * kWarpSize + lane) * kVector + j] = o[i][j];
  __syncthreads();
  const float sink = p.sink[h] * kLog2e;
  float m_all = sink;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, m_s[w]);
  float factor[kWarps];
  float denom = exp2f(sink - m_all);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    factor[w] = exp2f(m_s[w] - m_all);
    denom += l_s[w] * factor[w];
  }
  const float inv_denom = 1.0f / denom;
  // Each thread reads and rewrites only its own dims of o_s[0].
  for (int d = tid; d < dim; d += kAttentionThreads) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc = fmaf(o_s[w][d], factor[w], acc);
    o_s[0][d] = acc * inv_denom;
  }
  __syncthreads();

  // The inverse rotation at the query's position on the trailing rope_dim dims, then store.
  const int pos = p.positions[b];
  const bool rotate = p.rope_cos != nullptr && p.rope_dim > 0 && pos >= 0 && pos < p.num_positions;
  const int rope_begin = dim - p.rope_dim;
  const int rope_half = p.rope_dim / 2;
  const float* result = o_s[0];
  __nv_bfloat16* out = p.out + (static_cast<int64_t>(b) * p.heads + h) * dim;
  for (int d = tid; d < dim; d += kAttentionThreads) {
    float value = result[d];
    if (rotate && d >= rope_begin) {
      const int i = (d - rope_begin) / 2;
      const float cs = p.rope_cos[static_cast<int64_t>(pos) * rope_half + i];
      const float sn = p.rope_sin[static_cast<int64_t>(pos) * rope_half + i];
      const float x0 = result[rope_begin + 2 * i];
      const float x1 = result[rope_begin + 2 * i + 1];
      value = ((d - rope_begin) & 1) == 0 ? x0 * cs + x1 * sn : x1 * cs - x0 * sn;
    }
    out[d] = __float2bfloat16_rn(value);
  }
}

template <size_t kTile>
cudaError_t LaunchAttentionTile(const SparseAttentionParams& p, cudaStream_t stream) {
  if constexpr (kTile == std::size(kGenericAttentionTiles)) {
    return cudaErrorInvalidValue;
  } else {
    constexpr GenericAttentionTile tile = kGenericAttentionTiles[kTile];
    if (p.head_dim % tile.vector == 0 && p.head_dim <= kWarpSize * tile.vector * tile.iterations) {
      const dim3 grid(static_cast<unsigned>(p.batch), static_cast<unsigned>(p.heads));
      return LaunchDependent(SparseAttentionGenericKernel<tile.vector, tile.iterations>, LaunchShape{grid, dim3(kAttentionThreads)}, stream, p);
    }
    return LaunchAttentionTile<kTile + 1>(p, stream);
  }
}

// Grid (key_ctas, rows_ctas): CTA (x, y) takes requests y, y + rows_ctas, ... and in each the
// keys x * kWarps + w + i * key_ctas * kWarps for its warps w. A warp scores one key: the key
// row goes to its slice of shared memory, then groups of lanes_per_head lanes each take one
// head's dot product (lanes split the dims), and the weighted ReLUs are summed over the warp.
__global__ void __launch_bounds__(kIndexerThreads) IndexerScoresGenericKernel(const IndexerScoresParams p) {
  StartAfterPredecessor();
  extern __shared__ float smem[];
  const int dim = p.dim;
  const int heads = p.heads;
  const int q_stride = dim + 1;  // odd: lanes of different heads hit different banks
  float* q_s = smem;                                                         // [heads, dim + 1]
  float* w_s = q_s + static_cast<int64_t>(heads) * q_stride;                 // [heads]
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  float* key_s = w_s + heads + static_cast<int64_t>(warp) * dim;             // [dim], this warp's

  int lanes_per_head = 1;
  while (heads * lanes_per_head * 2 <= kWarpSize) lanes_per_head *= 2;
  const int heads_per_pass = kWarpSize / lanes_per_head;
  const int head_in_pass = lane / lanes_per_head;
  const int part = lane % lanes_per_head;

  const int64_t limit64 = static_cast<int64_t>(p.max_pages) * p.page_size;
  const int limit = static_cast<int>(limit64 < p.score_stride ? limit64 : p.score_stride);
  const int first_key = static_cast<int>(blockIdx.x) * kGenericIndexerWarps;
  const int key_step = static_cast<int>(gridDim.x) * kGenericIndexerWarps;

  for (int b = static_cast<int>(blockIdx.y); b < p.batch; b += static_cast<int>(gridDim.y)) {
    int n = p.num_entries[b];
    n = n < 0 ? 0 : (n > limit ? limit : n);
    if (first_key >= n) continue;  // uniform over the CTA

    const __nv_bfloat16* q = p.q + static_cast<int64_t>(b) * heads * dim;
    for (int i = tid; i < heads * dim; i += kIndexerThreads)
      q_s[(i / dim) * q_stride + i % dim] = __bfloat162float(q[i]);
    for (int i = tid; i < heads; i += kIndexerThreads) w_s[i] = p.weights[static_cast<int64_t>(b) * heads + i];
    __syncthreads();

    float* scores = p.scores + static_cast<int64_t>(b) * p.score_stride;
    const int32_t* table = PageTableRow(p.page_table, p.page_table_rows, p.num_page_tables, p.max_pages, b);
    for (int k = first_key + warp; k < n; k += key_step) {
      const int staged = StagedRow(p.staged, b, k);
      const int page = staged == -1 && table != nullptr ? table[k / p.page_size] : -1;
      const int64_t row = static_cast<int64_t>(page) * p.page_size + k % p.page_size;
      const __nv_bfloat16* key_row = staged >= 0 ? static_cast<const __nv_bfloat16*>(p.staged.data) +
                                                       static_cast<int64_t>(staged) * dim
                                     : page >= 0 && row < p.num_key_rows ? p.keys + row * dim
                                                                         : nullptr;
      float score = 0.0f;
      if (key_row != nullptr) {  // uniform over the warp
        const uint32_t* key = reinterpret_cast<const uint32_t*>(key_row);
        for (int i = lane; 2 * i < dim; i += kWarpSize) {
          const uint32_t w = key[i];
          key_s[2 * i] = LowBF16(w);
          key_s[2 * i + 1] = HighBF16(w);
        }
        __syncwarp();
        float acc = 0.0f;
        for (int h0 = 0; h0 < heads; h0 += heads_per_pass) {
          const int h = h0 + head_in_pass;
          float dot = 0.0f;
          if (h < heads) {
            const float* qh = q_s + static_cast<int64_t>(h) * q_stride;
            for (int d = part; d < dim; d += lanes_per_head) dot = fmaf(qh[d], key_s[d], dot);
          }
          for (int offset = 1; offset < lanes_per_head; offset <<= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, offset);
          if (h < heads && part == 0) acc += w_s[h] * (fmaxf(dot, 0.0f) * p.scale);
        }
        score = WarpSum(acc);
        __syncwarp();  // the next key overwrites key_s
      }
      if (lane == 0) scores[k] = score;
    }
    __syncthreads();  // the next request overwrites q_s
  }
}

}  // namespace

cudaError_t LaunchSparseAttentionGeneric(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.heads <= 0 || p.heads > 65535 || p.head_dim <= 0 || p.head_dim % 2 != 0 ||
      p.head_dim > kGenericAttentionMaxDim || p.rope_dim % 2 != 0 || p.rope_dim > p.head_dim)
    return cudaErrorInvalidValue;
  if (p.entries_fp8 && (p.entry_rope_dim < 0 || p.entry_rope_dim % 2 != 0 || p.entry_rope_dim > p.head_dim))
    return cudaErrorInvalidValue;
  return LaunchAttentionTile<0>(p, stream);
}

cudaError_t LaunchIndexerScoresGeneric(const IndexerScoresParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.num_ctas <= 0 || p.num_ctas > 65535 || p.heads <= 0 || p.dim <= 0 || p.dim % 2 != 0 || p.page_size <= 0)
    return cudaErrorInvalidValue;
  const int64_t shared_bytes = GenericIndexerSharedBytes(p.heads, p.dim);
  if (shared_bytes > kGenericIndexerMaxSharedBytes) return cudaErrorInvalidValue;
  const int rows_ctas = p.batch < p.num_ctas ? p.batch : p.num_ctas;
  const int key_ctas = p.num_ctas / rows_ctas;
  const dim3 grid(static_cast<unsigned>(key_ctas), static_cast<unsigned>(rows_ctas));
  return LaunchDependent(IndexerScoresGenericKernel, LaunchShape{grid, dim3(kIndexerThreads), static_cast<size_t>(shared_bytes)}, stream, p);
}

}  // namespace peregrine::kernels
