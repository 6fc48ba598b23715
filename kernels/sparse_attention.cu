#include "kernels/sparse_attention.cuh"

#include <cmath>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "kernels/common/kv_fp8_load.cuh"
#include "kernels/common/mma.cuh"
#include "kernels/common/page_table.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr float kLog2e = 1.4426950408889634f;

// Compile-time tiling for H heads of width D. Heads are padded to whole 16-row MMA tiles.
//   S = Q K^T:   warps tile (heads x 64 rows): one 16-head tile along M per warp column
//   O += P V:    every warp owns all heads and D / 8 of the dims (its O stays in registers)
template <int kH, int kD>
struct Tiling {
  static constexpr int kHeadsPadded = kH < 16 ? 16 : kH;
  static constexpr int kMTiles = kHeadsPadded / 16;
  static constexpr int kBlockN = kSparseAttentionBlockN;
  static constexpr int kQkWarpsM = kMTiles;
  static constexpr int kQkWarpsN = kWarps / kQkWarpsM;
  static constexpr int kQkRows = kBlockN / kQkWarpsN;
  static constexpr int kQkNTiles = kQkRows / 8;
  static constexpr int kPvDims = kD / kWarps;
  static constexpr int kPvNTiles = kPvDims / 8;
  static constexpr int kDChunks = kD / 8;       // 16-byte chunks per Q / KV row
  static constexpr int kPChunks = kBlockN / 8;  // ... per P row
  static constexpr int kQBytes = kHeadsPadded * kD * 2;
  static constexpr int kKvBytes = 2 * kBlockN * kD * 2;  // double-buffered tile
  static constexpr int kPBytes = kHeadsPadded * kBlockN * 2;
  static constexpr int kRowSrcBytes = 3 * kBlockN * 8;  // ring of three tiles' row sources
  static constexpr int kRedBytes = 2 * kQkWarpsN * kHeadsPadded * 4;
  static constexpr int kMBytes = 2 * kHeadsPadded * 4;
  static constexpr int kScaleBytes = 2 * kBlockN * 16;  // FP8 rows' scales, double-buffered like the tile
  static constexpr int kSmemBytes = kQBytes + kKvBytes + kPBytes + kRowSrcBytes + kRedBytes + kMBytes + kScaleBytes;
  // FP8 rows widen in place, a warp per row: 16-byte raw chunks per lane (kD / 16 per row at most)
  static constexpr int kRawPerLane = (kD / 16 + kWarpSize - 1) / kWarpSize;

  static_assert(kHeadsPadded % 16 == 0 && kWarps % kQkWarpsM == 0, "heads must tile over the warps");
  static_assert(kQkRows % 8 == 0 && (kQkNTiles == 1 || kQkNTiles % 2 == 0));
  static_assert(kPvDims % 8 == 0 && (kPvNTiles == 1 || kPvNTiles % 2 == 0));
  static_assert(kD % 64 == 0, "rows must be swizzle-able (>= 128 bytes)");
  static_assert(KvFp8Align16(KvFp8RowLayout{kD, 0}.blocks()) <= 16, "an FP8 row's scales must fit 16 bytes");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the shared memory of one SM");
};

template <int kH, int kD>
__global__ void __launch_bounds__(kThreads, 1) SparseAttentionKernel(const SparseAttentionParams p) {
  StartAfterPredecessor();
  using T = Tiling<kH, kD>;
  constexpr int kHP = T::kHeadsPadded;
  constexpr int kBlockN = T::kBlockN;
  extern __shared__ __align__(128) uint8_t smem[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem);                // [kHP][kD], also output staging
  __nv_bfloat16* kv_s = reinterpret_cast<__nv_bfloat16*>(smem + T::kQBytes);  // [2][kBlockN][kD]
  __nv_bfloat16* p_s = reinterpret_cast<__nv_bfloat16*>(smem + T::kQBytes + T::kKvBytes);  // [kHP][kBlockN]
  // [3][kBlockN]: bf16 rows, or FP8 entries tagged (kernels/common/kv_fp8_load.cuh)
  const void** row_src = reinterpret_cast<const void**>(smem + T::kQBytes + T::kKvBytes + T::kPBytes);
  float* red_max = reinterpret_cast<float*>(smem + T::kQBytes + T::kKvBytes + T::kPBytes + T::kRowSrcBytes);
  float* red_sum = red_max + T::kQkWarpsN * kHP;  // [kQkWarpsN][kHP]
  float* m_buf = red_sum + T::kQkWarpsN * kHP;    // [2][kHP]: running max, ping-pong per tile
  uint8_t* scale_s = reinterpret_cast<uint8_t*>(m_buf + 2 * kHP);  // [2][kBlockN][16]: FP8 rows' scale bytes

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = lane / 4;
  const int t = lane % 4;
  const int j8 = lane / 8;
  const int wm = warp % T::kQkWarpsM;
  const int wn = warp / T::kQkWarpsM;
  const float scale2 = p.scale * kLog2e;
  const KvFp8RowLayout fp8_layout{kD, p.entry_rope_dim};
  const int64_t entry_bytes = p.entries_fp8 ? fp8_layout.row_bytes() : static_cast<int64_t>(kD) * 2;
  const int fp8_nope = fp8_layout.nope();
  const int fp8_raw_chunks = (fp8_nope + 15) / 16;  // 16 e4m3 codes each, one scale block (64 % 16 == 0)

  const int seg_begin = p.schedule[blockIdx.x];
  const int seg_end = p.schedule[blockIdx.x + 1];
  for (int sg = seg_begin; sg < seg_end; ++sg) {
    const int* seg = p.schedule + p.layout.segments_offset() + 4 * sg;
    const int b = seg[0];
    const int row_begin = seg[1];
    const int slot = seg[3];

    // The request's rows as the device sees them; the plan's range is clipped to them.
    int wl = p.window_lengths[b];
    wl = wl < 0 ? 0 : (wl > p.window_capacity ? p.window_capacity : wl);
    int cl = 0;
    if (p.compressed_kv != nullptr) {
      const int64_t cap = p.compressed_indices != nullptr ? p.compressed_capacity
                                                          : static_cast<int64_t>(p.max_pages) * p.page_size;
      const int64_t len = p.compressed_lengths[b];
      cl = static_cast<int>(len < 0 ? 0 : (len > cap ? cap : len));
    }
    const int row_end = seg[2] < wl + cl ? seg[2] : wl + cl;
    const int num_tiles = row_end > row_begin ? (row_end - row_begin + kBlockN - 1) / kBlockN : 0;
    const __nv_bfloat16* q = p.q + static_cast<int64_t>(b) * kH * kD;
    const int32_t* table =
        p.compressed_kv != nullptr ? PageTableRow(p.page_table, p.page_table_rows, p.num_page_tables, p.max_pages, b)
                                   : nullptr;

    __syncthreads();  // the previous segment is done with q_s (staging) and m_buf
    for (int i = tid; i < kHP * T::kDChunks; i += kThreads) {
      const int h = i / T::kDChunks;
      const int c = i % T::kDChunks;
      const bool valid = h < kH;
      CpAsync16(q_s + SwizzledChunk<T::kDChunks>(h, c) * 8, valid ? q + h * kD + c * 8 : q, valid);
    }
    for (int i = tid; i < kHP; i += kThreads) m_buf[i] = -INFINITY;

    // Row sources of tile t live in row_src[t % 3]. Tile t + 2's are resolved while tile t is
    // computed, in three steps, so that the dependent global loads (index list, then page
    // table) overlap the MMAs instead of stalling the CTA at a barrier.
    int pending_value = -1;  // threads < kBlockN: window row or entry number, -1 when masked
    bool pending_window = false;
    int pending_page = -1;
    int pending_staged = -1;  // a staged entry's row (-2: masked), -1 for pool entries
    auto resolve_begin = [&](int tile) {
      pending_value = -1;
      pending_window = false;
      const int r = row_begin + tile * kBlockN + tid;
      if (tid < kBlockN && tile < num_tiles && r < row_end) {
        if (r < wl) {
          pending_window = true;
          pending_value = p.window_indices[static_cast<int64_t>(b) * p.window_capacity + r];
        } else {
          const int c = r - wl;
          pending_value = p.compressed_indices != nullptr
                              ? p.compressed_indices[static_cast<int64_t>(b) * p.compressed_capacity + c]
                              : c;
        }
      }
    };
    auto resolve_page = [&]() {
      pending_page = -1;
      pending_staged = -1;
      if (tid < kBlockN && !pending_window && pending_value >= 0) {
        pending_staged = StagedRow(p.staged, b, pending_value);
        if (pending_staged == -1 && pending_value / p.page_size < p.max_pages)
          pending_page = table != nullptr ? table[pending_value / p.page_size] : -1;
      }
    };
    auto resolve_end = [&](int ring) {
      if (tid < kBlockN) {
        const void* src = nullptr;
        const uint8_t* entry = nullptr;
        if (pending_window) {
          if (pending_value >= 0 && pending_value < p.num_window_rows)
            src = p.window_kv + static_cast<int64_t>(pending_value) * kD;
        } else if (pending_staged >= 0) {
          entry = static_cast<const uint8_t*>(p.staged.data) + pending_staged * entry_bytes;
        } else if (pending_page >= 0) {
          const int64_t row = static_cast<int64_t>(pending_page) * p.page_size + pending_value % p.page_size;
          if (row < p.num_compressed_rows) entry = static_cast<const uint8_t*>(p.compressed_kv) + row * entry_bytes;
        }
        if (entry != nullptr) src = p.entries_fp8 ? TagFp8Row(entry) : static_cast<const void*>(entry);
        row_src[ring * kBlockN + tid] = src;
      }
    };
    // FP8 rows land raw: their e4m3 codes in the row's first ceil(nope / 16) chunks, their scale
    // bytes in scale_s, their bf16 rope dims where they belong. widen() turns the codes into bf16
    // in place once the tile has landed, so every global load stays asynchronous.
    auto issue = [&](int tile) {
      __nv_bfloat16* dst = kv_s + (tile & 1) * kBlockN * kD;
      const void* const* src_rows = row_src + (tile % 3) * kBlockN;
      for (int i = tid; i < kBlockN * T::kDChunks; i += kThreads) {
        const int r = i / T::kDChunks;
        const int c = i % T::kDChunks;
        const void* src = src_rows[r];
        __nv_bfloat16* to = dst + SwizzledChunk<T::kDChunks>(r, c) * 8;
        if (src == nullptr || !IsFp8Row(src)) {
          CpAsync16(to, src != nullptr ? static_cast<const __nv_bfloat16*>(src) + c * 8 : q, src != nullptr);
        } else if (c * 8 >= fp8_nope) {
          CpAsync16(to, Fp8RowBytes(src) + fp8_layout.rope_offset() + 2 * (c * 8 - fp8_nope), true);
        } else if (c < fp8_raw_chunks) {
          CpAsync16(to, Fp8RowBytes(src) + 16 * c, true);
        }
      }
      if (p.entries_fp8) {
        for (int r = tid; r < kBlockN; r += kThreads) {
          const void* src = src_rows[r];
          if (src != nullptr && IsFp8Row(src))
            CpAsync16(scale_s + ((tile & 1) * kBlockN + r) * 16, Fp8RowBytes(src) + fp8_layout.scale_offset(), true);
        }
      }
    };
    // A warp widens a row at a time: each lane reads its raw chunks, then (the warp's reads done:
    // a chunk's bf16 values overwrite other chunks' codes) writes their bf16 values. The tile is
    // ready for every warp after the barrier.
    auto widen = [&](int tile) {
      __nv_bfloat16* rows = kv_s + (tile & 1) * kBlockN * kD;
      const void* const* src_rows = row_src + (tile % 3) * kBlockN;
      for (int r = warp; r < kBlockN; r += kWarps) {
        const void* src = src_rows[r];
        if (src == nullptr || !IsFp8Row(src)) continue;  // the same for the whole warp
        uint4 raw[T::kRawPerLane];
#pragma unroll
        for (int j = 0; j < T::kRawPerLane; ++j) {
          const int k = lane + j * kWarpSize;
          if (k < fp8_raw_chunks) raw[j] = *reinterpret_cast<const uint4*>(rows + SwizzledChunk<T::kDChunks>(r, k) * 8);
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < T::kRawPerLane; ++j) {
          const int k = lane + j * kWarpSize;
          if (k >= fp8_raw_chunks) continue;
          const float scale = KvFp8Scale(scale_s[((tile & 1) * kBlockN + r) * 16 + 16 * k / kKvFp8Block]);
          const uint4 v = raw[j];
          *reinterpret_cast<uint4*>(rows + SwizzledChunk<T::kDChunks>(r, 2 * k) * 8) =
              DequantFp8Eight(make_uint2(v.x, v.y), scale);
          if (16 * k + 8 < fp8_nope)
            *reinterpret_cast<uint4*>(rows + SwizzledChunk<T::kDChunks>(r, 2 * k + 1) * 8) =
                DequantFp8Eight(make_uint2(v.z, v.w), scale);
        }
      }
      __syncthreads();
    };

    for (int first = 0; first < 2; ++first) {  // the first two tiles, synchronously
      resolve_begin(first);
      resolve_page();
      resolve_end(first);
    }
    __syncthreads();
    if (num_tiles > 0) issue(0);
    CpAsyncCommit();  // Q and the first tile

    float o[T::kMTiles][T::kPvNTiles][4];
    float l_run[T::kMTiles][2];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
      l_run[mt][0] = l_run[mt][1] = 0.0f;
#pragma unroll
      for (int nt = 0; nt < T::kPvNTiles; ++nt) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    }
    int parity = 0;
    const int h0 = wm * 16 + g;  // the two heads of this lane's S rows
    const int h1 = h0 + 8;

    for (int tile = 0; tile < num_tiles; ++tile) {
      const int buf = tile & 1;
      __syncthreads();  // the next tile's rows are visible; its buffer was released last tile
      if (tile + 1 < num_tiles) issue(tile + 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
      __syncthreads();  // this tile (and Q) landed for every thread
      if (p.entries_fp8) widen(tile);
      resolve_begin(tile + 2);

      const __nv_bfloat16* kv_tile = kv_s + buf * kBlockN * kD;
      const void* const* src_tile = row_src + (tile % 3) * kBlockN;

      // ---- S = Q K^T for 16 heads x kQkRows rows
      float s[T::kQkNTiles][4];
#pragma unroll
      for (int nt = 0; nt < T::kQkNTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll 4
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t a[4];
        LdMatrixX4(a, q_s + SwizzledChunk<T::kDChunks>(wm * 16 + (j8 % 2) * 8 + lane % 8, 2 * ks + j8 / 2) * 8);
        if constexpr (T::kQkNTiles % 2 == 0) {
#pragma unroll
          for (int np = 0; np < T::kQkNTiles / 2; ++np) {
            const int row = wn * T::kQkRows + np * 16 + (j8 / 2) * 8 + lane % 8;
            uint32_t bk[4];
            LdMatrixX4(bk, kv_tile + SwizzledChunk<T::kDChunks>(row, 2 * ks + j8 % 2) * 8);
            MmaBF16(s[2 * np], a, bk[0], bk[1]);
            MmaBF16(s[2 * np + 1], a, bk[2], bk[3]);
          }
        } else {
          const int row = wn * T::kQkRows + lane % 8;
          uint32_t bk[2];
          LdMatrixX2(bk, kv_tile + SwizzledChunk<T::kDChunks>(row, 2 * ks + j8 % 2) * 8);
          MmaBF16(s[0], a, bk[0], bk[1]);
        }
      }

      resolve_page();

      // ---- masked, scaled (log2 units) and the tile's row max per head
      float mx0 = -INFINITY;
      float mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < T::kQkNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = wn * T::kQkRows + nt * 8 + 2 * t + e;
          const bool valid = src_tile[col] != nullptr;
          s[nt][e] = valid ? s[nt][e] * scale2 : -INFINITY;
          s[nt][2 + e] = valid ? s[nt][2 + e] * scale2 : -INFINITY;
          mx0 = fmaxf(mx0, s[nt][e]);
          mx1 = fmaxf(mx1, s[nt][2 + e]);
        }
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, offset));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, offset));
      }
      if (t == 0) {
        red_max[wn * kHP + h0] = mx0;
        red_max[wn * kHP + h1] = mx1;
      }
      __syncthreads();

      // ---- P = exp2(S - m_new) in bf16, its row sums, and the new running max
      float m_new0 = m_buf[parity * kHP + h0];
      float m_new1 = m_buf[parity * kHP + h1];
#pragma unroll
      for (int w = 0; w < T::kQkWarpsN; ++w) {
        m_new0 = fmaxf(m_new0, red_max[w * kHP + h0]);
        m_new1 = fmaxf(m_new1, red_max[w * kHP + h1]);
      }
      const float base0 = m_new0 == -INFINITY ? 0.0f : m_new0;
      const float base1 = m_new1 == -INFINITY ? 0.0f : m_new1;
      float sum0 = 0.0f;
      float sum1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < T::kQkNTiles; ++nt) {
        const uint32_t w0 = PackBF16x2(exp2f(s[nt][0] - base0), exp2f(s[nt][1] - base0));
        const uint32_t w1 = PackBF16x2(exp2f(s[nt][2] - base1), exp2f(s[nt][3] - base1));
        // Sum what the MMA will see, so that numerator and denominator agree.
        const float2 r0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w0));
        const float2 r1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w1));
        sum0 += r0.x + r0.y;
        sum1 += r1.x + r1.y;
        const int col = wn * T::kQkRows + nt * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(p_s + SwizzledChunk<T::kPChunks>(h0, col / 8) * 8 + col % 8) = w0;
        *reinterpret_cast<uint32_t*>(p_s + SwizzledChunk<T::kPChunks>(h1, col / 8) * 8 + col % 8) = w1;
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset <<= 1) {
        sum0 += __shfl_xor_sync(0xffffffffu, sum0, offset);
        sum1 += __shfl_xor_sync(0xffffffffu, sum1, offset);
      }
      if (t == 0) {
        red_sum[wn * kHP + h0] = sum0;
        red_sum[wn * kHP + h1] = sum1;
        if (wn == 0) {
          m_buf[(parity ^ 1) * kHP + h0] = m_new0;
          m_buf[(parity ^ 1) * kHP + h1] = m_new1;
        }
      }
      __syncthreads();

      // ---- O = O * alpha + P V over this warp's dims
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int h = mt * 16 + g + 8 * half;
          const float m_old = m_buf[parity * kHP + h];
          const float m_cur = m_buf[(parity ^ 1) * kHP + h];
          const float alpha = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_cur);
          float add = 0.0f;
#pragma unroll
          for (int w = 0; w < T::kQkWarpsN; ++w) add += red_sum[w * kHP + h];
          l_run[mt][half] = l_run[mt][half] * alpha + add;
#pragma unroll
          for (int nt = 0; nt < T::kPvNTiles; ++nt) {
            o[mt][nt][2 * half] *= alpha;
            o[mt][nt][2 * half + 1] *= alpha;
          }
        }
      }
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {
        uint32_t a[T::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
          LdMatrixX4(a[mt], p_s + SwizzledChunk<T::kPChunks>(mt * 16 + (j8 % 2) * 8 + lane % 8, 2 * ks + j8 / 2) * 8);
        const int krow = ks * 16 + (j8 % 2) * 8 + lane % 8;
        if constexpr (T::kPvNTiles % 2 == 0) {
#pragma unroll
          for (int np = 0; np < T::kPvNTiles / 2; ++np) {
            uint32_t bv[4];
            LdMatrixX4Trans(bv, kv_tile + SwizzledChunk<T::kDChunks>(krow, warp * T::kPvNTiles + 2 * np + j8 / 2) * 8);
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt) {
              MmaBF16(o[mt][2 * np], a[mt], bv[0], bv[1]);
              MmaBF16(o[mt][2 * np + 1], a[mt], bv[2], bv[3]);
            }
          }
        } else {
          uint32_t bv[2];
          LdMatrixX2Trans(bv, kv_tile + SwizzledChunk<T::kDChunks>(krow, warp * T::kPvNTiles) * 8);
#pragma unroll
          for (int mt = 0; mt < T::kMTiles; ++mt) MmaBF16(o[mt][0], a[mt], bv[0], bv[1]);
        }
      }
      resolve_end((tile + 2) % 3);
      parity ^= 1;
    }

    // ---- finish: the whole request here (sink, inverse RoPE, bf16 out) or a partial
    CpAsyncWait<0>();
    __syncthreads();  // every warp is past its last read of q_s; no copy into q_s is in flight
    if (slot < 0) {
      const int pos = p.positions[b];
      const bool rotate = p.rope_cos != nullptr && pos >= 0 && pos < p.num_positions;
      const int rope_begin = kD - p.rope_dim;
      const int rope_half = p.rope_dim / 2;
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int h = mt * 16 + g + 8 * half;
          const float m = m_buf[parity * kHP + h];
          const float l = l_run[mt][half];
          float factor = 0.0f;
          if (h < kH && l > 0.0f) {
            const float sink2 = p.sink[h] * kLog2e;
            const float top = fmaxf(m, sink2);
            factor = exp2f(m - top) / (l * exp2f(m - top) + exp2f(sink2 - top));
          }
#pragma unroll
          for (int nt = 0; nt < T::kPvNTiles; ++nt) {
            const int d = warp * T::kPvDims + nt * 8 + 2 * t;
            float x0 = o[mt][nt][2 * half] * factor;
            float x1 = o[mt][nt][2 * half + 1] * factor;
            if (rotate && d >= rope_begin) {
              const int i = (d - rope_begin) / 2;
              const float c = p.rope_cos[static_cast<int64_t>(pos) * rope_half + i];
              const float sn = p.rope_sin[static_cast<int64_t>(pos) * rope_half + i];
              const float r0 = x0 * c + x1 * sn;
              const float r1 = x1 * c - x0 * sn;
              x0 = r0;
              x1 = r1;
            }
            *reinterpret_cast<uint32_t*>(q_s + SwizzledChunk<T::kDChunks>(h, d / 8) * 8 + d % 8) = PackBF16x2(x0, x1);
          }
        }
      }
      __syncthreads();
      for (int i = tid; i < kH * T::kDChunks; i += kThreads) {
        const int h = i / T::kDChunks;
        const int c = i % T::kDChunks;
        *reinterpret_cast<uint4*>(p.out + (static_cast<int64_t>(b) * kH + h) * kD + c * 8) =
            *reinterpret_cast<const uint4*>(q_s + SwizzledChunk<T::kDChunks>(h, c) * 8);
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int h = mt * 16 + g + 8 * half;
          if (h >= kH) continue;
          const float m = m_buf[parity * kHP + h];
          const float l = l_run[mt][half];
          const float inv = l > 0.0f ? 1.0f / l : 0.0f;
          float* dst = p.partial_o + (static_cast<int64_t>(slot) * kH + h) * kD;
#pragma unroll
          for (int nt = 0; nt < T::kPvNTiles; ++nt) {
            const int d = warp * T::kPvDims + nt * 8 + 2 * t;
            *reinterpret_cast<float2*>(dst + d) = make_float2(o[mt][nt][2 * half] * inv, o[mt][nt][2 * half + 1] * inv);
          }
          if (warp == 0 && t == 0)
            p.partial_lse[static_cast<int64_t>(slot) * kH + h] = l > 0.0f ? m + log2f(l) : -INFINITY;
        }
      }
    }
  }
}

// Merges the partials of split requests with the sink. Work items are (split request, head,
// 128-dim chunk); each warp takes items independently (no block barriers), so thousands of
// two-partial items (B = 64, every request split in two) run in one wave, and a 130-partial
// item (B = 1 at 1M context) keeps eight 16-byte loads in flight per lane.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / kWarpSize;

template <int kD>
__global__ void __launch_bounds__(kCombineThreads) SparseAttentionCombineKernel(const SparseAttentionParams p) {
  StartAfterPredecessor();
  constexpr int kVec = kD / 4;                                   // float4s per head row
  constexpr int kChunks = (kVec + kWarpSize - 1) / kWarpSize;    // one float4 per lane per chunk
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int heads = p.heads;
  const int* list = p.schedule + p.layout.combine_offset();
  const int items_per_request = heads * kChunks;
  const int num_items = list[0] * items_per_request;
  const int rope_begin = kD - p.rope_dim;
  const int rope_half = p.rope_dim / 2;
  const int num_warps = static_cast<int>(gridDim.x) * kCombineWarps;

  for (int item = static_cast<int>(blockIdx.x) * kCombineWarps + static_cast<int>(threadIdx.x) / kWarpSize;
       item < num_items; item += num_warps) {
    const int b = list[1 + item / items_per_request];
    const int h = (item % items_per_request) / kChunks;
    const int v = (item % kChunks) * kWarpSize + lane;  // this lane's float4 in the head row
    const int* info = p.schedule + p.layout.requests_offset() + 2 * b;
    const int first = info[0];
    const int count = info[1] < 0 ? 0 : info[1];
    const float* lse = p.partial_lse + static_cast<int64_t>(first) * heads + h;

    const float sink2 = p.sink[h] * kLog2e;
    float top = -INFINITY;
    for (int j = lane; j < count; j += kWarpSize) top = fmaxf(top, lse[static_cast<int64_t>(j) * heads]);
    top = fmaxf(WarpMax(top), sink2);
    float denom = 0.0f;
    for (int j = lane; j < count; j += kWarpSize) denom += exp2f(lse[static_cast<int64_t>(j) * heads] - top);
    const float inv = 1.0f / (WarpSum(denom) + exp2f(sink2 - top));
    if (v >= kVec) continue;

    const float4* src = reinterpret_cast<const float4*>(p.partial_o + (static_cast<int64_t>(first) * heads + h) * kD) + v;
    const int64_t step = static_cast<int64_t>(heads) * kVec;  // float4s between consecutive partials
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int j = 0; j < count; ++j) {
      const float w = exp2f(lse[static_cast<int64_t>(j) * heads] - top) * inv;
      const float4 x = src[j * step];
      acc.x += w * x.x;
      acc.y += w * x.y;
      acc.z += w * x.z;
      acc.w += w * x.w;
    }

    float x[4] = {acc.x, acc.y, acc.z, acc.w};
    const int pos = p.positions[b];
    const bool rotate = p.rope_cos != nullptr && pos >= 0 && pos < p.num_positions;
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      const int d = 4 * v + 2 * pair;
      if (rotate && d >= rope_begin) {
        const int i = (d - rope_begin) / 2;
        const float c = p.rope_cos[static_cast<int64_t>(pos) * rope_half + i];
        const float sn = p.rope_sin[static_cast<int64_t>(pos) * rope_half + i];
        const float x0 = x[2 * pair];
        const float x1 = x[2 * pair + 1];
        x[2 * pair] = x0 * c + x1 * sn;
        x[2 * pair + 1] = x1 * c - x0 * sn;
      }
    }
    *reinterpret_cast<uint2*>(p.out + (static_cast<int64_t>(b) * heads + h) * kD + 4 * v) =
        make_uint2(PackBF16x2(x[0], x[1]), PackBF16x2(x[2], x[3]));
  }
}

template <int kH, int kD>
cudaError_t PrepareConfig() {
  return cudaFuncSetAttribute(SparseAttentionKernel<kH, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              Tiling<kH, kD>::kSmemBytes);
}

template <int kH, int kD>
cudaError_t LaunchConfig(const SparseAttentionParams& p, cudaStream_t stream) {
  constexpr int kSmem = Tiling<kH, kD>::kSmemBytes;
  const cudaError_t error = LaunchDependent(SparseAttentionKernel<kH, kD>,
                                            LaunchShape{dim3(static_cast<unsigned>(p.layout.num_ctas)), dim3(kThreads), kSmem},
                                            stream, p);
  if (error != cudaSuccess) return error;
  return LaunchDependent(SparseAttentionCombineKernel<kD>, LaunchShape{dim3(static_cast<unsigned>(4 * p.layout.num_ctas)), dim3(kCombineThreads)}, stream, p);
}

template <int kH, int kD>
constexpr bool Matches(const SparseAttentionParams& p) {
  return p.heads == kH && p.head_dim == kD;
}

}  // namespace

namespace {

constexpr const auto& kConfigs = kSparseAttentionConfigs;
using ConfigIndices = std::make_index_sequence<std::size(kSparseAttentionConfigs)>;

template <size_t... I>
int SharedBytesOf(int heads, int head_dim, std::index_sequence<I...>) {
  int bytes = 0;
  (((heads == kConfigs[I].heads && head_dim == kConfigs[I].head_dim)
        ? (bytes = Tiling<kConfigs[I].heads, kConfigs[I].head_dim>::kSmemBytes, true)
        : false) ||
   ...);
  return bytes;
}

template <size_t... I>
cudaError_t PrepareAll(std::index_sequence<I...>) {
  cudaError_t error = cudaSuccess;
  (((error = PrepareConfig<kConfigs[I].heads, kConfigs[I].head_dim>()) != cudaSuccess) || ...);
  return error;
}

template <size_t... I>
cudaError_t LaunchMatching(const SparseAttentionParams& p, cudaStream_t stream, std::index_sequence<I...>) {
  cudaError_t error = cudaErrorInvalidValue;
  ((Matches<kConfigs[I].heads, kConfigs[I].head_dim>(p)
        ? (error = LaunchConfig<kConfigs[I].heads, kConfigs[I].head_dim>(p, stream), true)
        : false) ||
   ...);
  return error;
}

}  // namespace

int SparseAttentionSharedBytes(int heads, int head_dim) { return SharedBytesOf(heads, head_dim, ConfigIndices{}); }

cudaError_t PrepareSparseAttention() { return PrepareAll(ConfigIndices{}); }

cudaError_t LaunchSparseAttention(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.layout.num_ctas <= 0) return cudaErrorInvalidValue;
  // FP8 entries: the e4m3 and the rope dims each in whole 16-byte chunks of the bf16 tile.
  if (p.entries_fp8 && (p.entry_rope_dim < 0 || p.entry_rope_dim % 8 != 0 || p.entry_rope_dim > p.head_dim ||
                        (p.head_dim - p.entry_rope_dim) % 8 != 0))
    return cudaErrorInvalidValue;
  return LaunchMatching(p, stream, ConfigIndices{});
}

}  // namespace peregrine::kernels
