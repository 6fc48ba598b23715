#include "kernels/compressor_step.cuh"

#include <cuda_bf16.h>

#include "kernels/common/kv_fp8_row.h"
#include "kernels/common/page_table.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

// Appends one token's kv and gate rows (the gate with its in-block bias) at `ring_row`.
template <int kThreads, typename T>
__device__ __forceinline__ void AppendRow(const T* kv, const T* gate, const float* ape, float* kv_row, float* gate_row,
                                          int width) {
  for (int c = static_cast<int>(threadIdx.x); c < width; c += kThreads) {
    kv_row[c] = ToFloat(kv[c]);
    gate_row[c] = ToFloat(gate[c]) + ape[c];
  }
}

// The entry of a completed block, per channel c < dim: a softmax over the block's gate
// values weighting its kv values, over the current block's `ratio` slots and then, with
// `has_previous`, the previous block's (as in the reference), then RMSNorm(norm_weight).
// cur_kv(r, c) etc. read slot r's value of channel c. Leaves the entry in `entry` (shared,
// dim floats) for every thread.
template <int kThreads, typename CurKv, typename CurGate, typename PrevKv, typename PrevGate>
__device__ __forceinline__ void PoolEntry(const CurKv& cur_kv, const CurGate& cur_gate, const PrevKv& prev_kv,
                                          const PrevGate& prev_gate, bool has_previous, int ratio, int dim,
                                          const float* norm_weight, float eps, float* entry, float* scratch) {
  const int tid = static_cast<int>(threadIdx.x);
  __syncthreads();  // every thread's ring rows (or staged values) are written
  float sum_squares = 0.0f;
  for (int c = tid; c < dim; c += kThreads) {
    float max_gate = -INFINITY;
    for (int r = 0; r < ratio; ++r) max_gate = fmaxf(max_gate, cur_gate(r, c));
    if (has_previous)
      for (int r = 0; r < ratio; ++r) max_gate = fmaxf(max_gate, prev_gate(r, c));
    float denom = 0.0f;
    float acc = 0.0f;
    for (int r = 0; r < ratio; ++r) {
      const float e = expf(cur_gate(r, c) - max_gate);
      denom += e;
      acc += e * cur_kv(r, c);
    }
    if (has_previous) {
      for (int r = 0; r < ratio; ++r) {
        const float e = expf(prev_gate(r, c) - max_gate);
        denom += e;
        acc += e * prev_kv(r, c);
      }
    }
    const float value = acc / denom;
    entry[c] = value;
    sum_squares += value * value;
  }
  sum_squares = BlockSum<kThreads>(sum_squares, scratch);
  const float scale = rsqrtf(sum_squares / static_cast<float>(dim) + eps);
  for (int c = tid; c < dim; c += kThreads) entry[c] = entry[c] * scale * norm_weight[c];
  __syncthreads();
}

// Writes `entry` rotated at `rope_position` on its trailing rope_dim dims, in bf16.
template <int kThreads>
__device__ __forceinline__ void StoreEntry(const float* entry, __nv_bfloat16* out, int rope_position,
                                           const float* rope_cos, const float* rope_sin, int dim, int rope_dim) {
  const int rope_begin = dim - rope_dim;
  const int rope_half = rope_dim / 2;
  for (int c = static_cast<int>(threadIdx.x); c < dim; c += kThreads) {
    float v = entry[c];
    if (c >= rope_begin) {
      const int i = (c - rope_begin) / 2;
      const float cs = rope_cos[static_cast<int64_t>(rope_position) * rope_half + i];
      const float sn = rope_sin[static_cast<int64_t>(rope_position) * rope_half + i];
      const float x0 = entry[rope_begin + 2 * i];
      const float x1 = entry[rope_begin + 2 * i + 1];
      v = ((c - rope_begin) & 1) == 0 ? x0 * cs - x1 * sn : x1 * cs + x0 * sn;
    }
    out[c] = __float2bfloat16_rn(v);
  }
}

// The same entry as V4's FP8 row (kernels/common/kv_fp8_row.h): the rotated rope dims in
// bf16, each block of 64 unrotated values in e4m3 under its power-of-two scale (warp w takes
// blocks w, w + warps, ...), the padding zeroed. Reads `entry` only.
template <int kThreads>
__device__ __forceinline__ void StoreEntryFp8(const float* entry, uint8_t* out, int rope_position,
                                              const float* rope_cos, const float* rope_sin, int dim, int rope_dim) {
  static_assert(kKvFp8Block == 2 * kWarpSize);
  const KvFp8RowLayout layout{dim, rope_dim};
  const int nope = layout.nope();
  const int tid = static_cast<int>(threadIdx.x);
  const int rope_half = rope_dim / 2;
  uint16_t* rope_out = reinterpret_cast<uint16_t*>(out + layout.rope_offset());
  for (int i = tid; i < rope_half; i += kThreads) {
    const float cs = rope_cos[static_cast<int64_t>(rope_position) * rope_half + i];
    const float sn = rope_sin[static_cast<int64_t>(rope_position) * rope_half + i];
    const float x0 = entry[nope + 2 * i];
    const float x1 = entry[nope + 2 * i + 1];
    rope_out[2 * i] = KvFp8EncodeBF16(x0 * cs - x1 * sn);
    rope_out[2 * i + 1] = KvFp8EncodeBF16(x1 * cs + x0 * sn);
  }
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  for (int block = warp; block < layout.blocks(); block += kThreads / kWarpSize) {
    const int i0 = block * kKvFp8Block + lane;
    const int i1 = i0 + kWarpSize;
    const float v0 = i0 < nope ? entry[i0] : 0.0f;
    const float v1 = i1 < nope ? entry[i1] : 0.0f;
    const float amax = WarpMax(fmaxf(fabsf(v0), fabsf(v1)));  // fmaxf leaves NaN out
    const uint8_t code = KvFp8ScaleCode(amax);
    const float inverse = KvFp8InverseScale(code);
    if (i0 < nope) out[i0] = KvFp8EncodeE4M3(v0 * inverse);
    if (i1 < nope) out[i1] = KvFp8EncodeE4M3(v1 * inverse);
    if (lane == 0) out[layout.scale_offset() + block] = code;
  }
  for (int i = nope + tid; i < layout.rope_offset(); i += kThreads) out[i] = 0;
  for (int i = layout.rope_offset() + 2 * rope_dim + tid; i < layout.scale_offset(); i += kThreads) out[i] = 0;
  for (int i = layout.scale_offset() + layout.blocks() + tid; i < layout.row_bytes(); i += kThreads) out[i] = 0;
}

// Entry row `row` of a cache (bf16 rows or FP8 rows) written from `entry`.
template <int kThreads>
__device__ __forceinline__ void StoreEntryRow(const float* entry, void* cache, bool fp8, int64_t row,
                                              int rope_position, const float* rope_cos, const float* rope_sin,
                                              int dim, int rope_dim) {
  if (fp8) {
    StoreEntryFp8<kThreads>(entry, static_cast<uint8_t*>(cache) + row * KvFp8RowLayout{dim, rope_dim}.row_bytes(),
                            rope_position, rope_cos, rope_sin, dim, rope_dim);
  } else {
    StoreEntry<kThreads>(entry, static_cast<__nv_bfloat16*>(cache) + row * dim, rope_position, rope_cos, rope_sin,
                         dim, rope_dim);
  }
}

// One CTA per request, looping over its tokens. Thread t owns channels t, t + kThreads, ...
// of the entry; the pooled entry is staged in shared memory (dim floats) for the RoPE pairs.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) CompressorStepKernel(const CompressorStepParams p) {
  StartAfterPredecessor();
  static_assert(kThreads % kWarpSize == 0);
  extern __shared__ float entry[];
  __shared__ float scratch[kThreads / kWarpSize];

  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int first_position = p.positions[b];
  const int slot = p.state_slots[b];
  if (first_position < 0 || slot < 0 || slot >= p.num_state_slots) return;
  int begin = b;
  int end = b + 1;
  if (p.token_offsets != nullptr) {
    begin = p.token_offsets[b];
    end = p.token_offsets[b + 1];
    begin = begin < 0 ? 0 : (begin > p.num_tokens ? p.num_tokens : begin);
    end = end < begin ? begin : (end > p.num_tokens ? p.num_tokens : end);
  }

  const int dim = p.dim;
  const int ratio = p.ratio;
  const int coff = p.coff;
  const int width = coff * dim;
  const int rows_per_slot = coff * ratio;
  const bool overlap = coff == 2;
  const int64_t slot_base = static_cast<int64_t>(slot) * rows_per_slot * width;
  float* kv_state = p.kv_state + slot_base;
  float* gate_state = p.gate_state + slot_base;

  for (int t = begin; t < end; ++t) {
    const int pos = first_position + (t - begin);
    const int in_block = pos % ratio;
    const int block = pos / ratio;
    const int half = overlap ? (block & 1) : 0;

    // Append this token's row.
    {
      float* kv_row = kv_state + static_cast<int64_t>(half * ratio + in_block) * width;
      float* gate_row = gate_state + static_cast<int64_t>(half * ratio + in_block) * width;
      const float* ape = p.ape + static_cast<int64_t>(in_block) * width;
      const int64_t in_offset = static_cast<int64_t>(t) * width;
      if (p.input_type == ElementType::kBF16) {
        AppendRow<kThreads>(static_cast<const __nv_bfloat16*>(p.kv) + in_offset,
                            static_cast<const __nv_bfloat16*>(p.gate) + in_offset, ape, kv_row, gate_row, width);
      } else {
        AppendRow<kThreads>(static_cast<const float*>(p.kv) + in_offset, static_cast<const float*>(p.gate) + in_offset,
                            ape, kv_row, gate_row, width);
      }
    }
    if ((pos + 1) % ratio != 0) continue;  // uniform over the CTA

    // Pool the block (the current block's slots, then the previous block's) and store it.
    const bool has_previous = overlap && block >= 1;
    const int current_column = overlap ? dim : 0;
    const float* cur_kv = kv_state + static_cast<int64_t>(half * ratio) * width + current_column;
    const float* cur_gate = gate_state + static_cast<int64_t>(half * ratio) * width + current_column;
    const float* prev_kv = kv_state + static_cast<int64_t>((half ^ 1) * ratio) * width;
    const float* prev_gate = gate_state + static_cast<int64_t>((half ^ 1) * ratio) * width;
    PoolEntry<kThreads>(
        [&](int r, int c) { return cur_kv[static_cast<int64_t>(r) * width + c]; },
        [&](int r, int c) { return cur_gate[static_cast<int64_t>(r) * width + c]; },
        [&](int r, int c) { return prev_kv[static_cast<int64_t>(r) * width + c]; },
        [&](int r, int c) { return prev_gate[static_cast<int64_t>(r) * width + c]; }, has_previous, ratio, dim,
        p.norm_weight, p.eps, entry, scratch);

    // Rotate at the block's first position and store.
    const int k = (pos + 1) / ratio - 1;
    const int rope_position = pos + 1 - ratio;
    const int page = k / p.page_size;
    if (page < p.max_pages && rope_position < p.num_positions) {
      const int32_t* table = PageTableRow(p.page_table, p.page_table_rows, p.num_page_tables, p.max_pages, b);
      const int physical_page = table != nullptr ? table[page] : -1;
      const int64_t row = static_cast<int64_t>(physical_page) * p.page_size + k % p.page_size;
      if (physical_page >= 0 && row < p.num_cache_rows)
        StoreEntryRow<kThreads>(entry, p.cache, p.cache_fp8, row, rope_position, p.rope_cos, p.rope_sin, dim,
                                p.rope_dim);
    }
    // A snapshot boundary: the block's ring rows, for a request that starts here.
    if (p.snapshot_table != nullptr && p.snapshot_interval > 0 && (pos + 1) % p.snapshot_interval == 0) {
      const int i = (pos + 1) / p.snapshot_interval - first_position / p.snapshot_interval - 1;
      const int record = i >= 0 && i < p.max_snapshots ? p.snapshot_table[static_cast<int64_t>(b) * p.max_snapshots + i] : -1;
      if (record >= 0 && record < p.num_snapshots) {
        const int64_t n = static_cast<int64_t>(ratio) * width;
        const float* kv_rows = kv_state + static_cast<int64_t>(half * ratio) * width;
        const float* gate_rows = gate_state + static_cast<int64_t>(half * ratio) * width;
        float* kv_out = p.snapshot_kv + record * p.snapshot_stride;
        float* gate_out = p.snapshot_gate + record * p.snapshot_stride;
        for (int64_t j = tid; j < n; j += kThreads) {
          kv_out[j] = kv_rows[j];
          gate_out[j] = gate_rows[j];
        }
      }
    }
    // The next token may overwrite ring rows just pooled (the previous block's half) and
    // the next block's entry overwrites `entry`.
    __syncthreads();
  }
}

// One CTA per step row; rows that are draft-tree nodes (tree_rows[t] >= 0) stage their ring
// row and, when they complete a block, the block's entry, and write no slot state. The
// block's slots at positions below the tree's root come from the slot's committed ring (the
// ring holds the current and the previous block there: nothing committed lies past the root),
// the others from the rows of the node's own path, so siblings never see each other's rows.
// The values and the order of operations are the sequential kernel's, so a kept node's entry
// is bit for bit the one decoding its path token by token would write.
template <int kThreads, typename T>
__global__ void __launch_bounds__(kThreads) CompressorTreeKernel(const CompressorStepParams p) {
  StartAfterPredecessor();
  extern __shared__ float entry[];
  __shared__ float scratch[kThreads / kWarpSize];

  const int t = static_cast<int>(blockIdx.x);
  const int stage = p.tree_rows[t];
  if (stage < 0 || stage >= p.num_stage_rows) return;
  const int pos = p.tree_positions[t];
  const int slot = p.tree_slots[t];
  const int32_t* path = p.tree_paths + static_cast<int64_t>(t) * p.path_capacity;
  const int root_row = path[0];
  if (pos < 0 || slot < 0 || slot >= p.num_state_slots || root_row < 0 || root_row >= p.num_tokens) return;
  const int root_position = p.tree_positions[root_row];
  const int depth = pos - root_position;
  if (root_position < 0 || depth < 0 || depth >= p.path_capacity) return;

  const int dim = p.dim;
  const int ratio = p.ratio;
  const bool overlap = p.coff == 2;
  const int width = p.coff * dim;
  const T* kv_in = static_cast<const T*>(p.kv);
  const T* gate_in = static_cast<const T*>(p.gate);
  // This node's ring row, as the sequential kernel would append it.
  AppendRow<kThreads>(kv_in + static_cast<int64_t>(t) * width, gate_in + static_cast<int64_t>(t) * width,
                      p.ape + static_cast<int64_t>(pos % ratio) * width, p.stage_kv + static_cast<int64_t>(stage) * width,
                      p.stage_gate + static_cast<int64_t>(stage) * width, width);
  if ((pos + 1) % ratio != 0) return;  // uniform over the CTA

  const int64_t slot_base = static_cast<int64_t>(slot) * p.coff * ratio * width;
  const float* ring_kv = p.kv_state + slot_base;
  const float* ring_gate = p.gate_state + slot_base;
  // Position q's value in full-width column c.
  auto kv_at = [&](int q, int c) -> float {
    if (q < root_position) {
      const int r = overlap ? ((q / ratio) & 1) * ratio + q % ratio : q % ratio;
      return ring_kv[static_cast<int64_t>(r) * width + c];
    }
    const int row = path[q - root_position];
    return row >= 0 && row < p.num_tokens ? ToFloat(kv_in[static_cast<int64_t>(row) * width + c]) : 0.0f;
  };
  auto gate_at = [&](int q, int c) -> float {
    if (q < root_position) {
      const int r = overlap ? ((q / ratio) & 1) * ratio + q % ratio : q % ratio;
      return ring_gate[static_cast<int64_t>(r) * width + c];
    }
    const int row = path[q - root_position];
    return row >= 0 && row < p.num_tokens
               ? ToFloat(gate_in[static_cast<int64_t>(row) * width + c]) + p.ape[static_cast<int64_t>(q % ratio) * width + c]
               : -INFINITY;
  };
  const int block = pos / ratio;
  const int current = block * ratio;
  const int previous = current - ratio;
  const int current_column = overlap ? dim : 0;
  PoolEntry<kThreads>([&](int r, int c) { return kv_at(current + r, current_column + c); },
                      [&](int r, int c) { return gate_at(current + r, current_column + c); },
                      [&](int r, int c) { return kv_at(previous + r, c); },
                      [&](int r, int c) { return gate_at(previous + r, c); }, overlap && block >= 1, ratio, dim,
                      p.norm_weight, p.eps, entry, scratch);
  const int rope_position = pos + 1 - ratio;
  if (rope_position < p.num_positions)
    StoreEntryRow<kThreads>(entry, p.stage_entries, p.cache_fp8, stage, rope_position, p.rope_cos, p.rope_sin, dim,
                            p.rope_dim);
}

template <int kThreads>
cudaError_t LaunchThreads(const CompressorStepParams& p, cudaStream_t stream) {
  const size_t shared_bytes = static_cast<size_t>(p.dim) * sizeof(float);
  if (p.batch > 0) {
    const cudaError_t e = LaunchDependent(CompressorStepKernel<kThreads>,
                                          LaunchShape{dim3(static_cast<unsigned>(p.batch)), dim3(kThreads), shared_bytes},
                                          stream, p);
    if (e != cudaSuccess) return e;
  }
  if (p.tree_rows == nullptr || p.num_tokens <= 0) return cudaSuccess;
  const LaunchShape tree_shape{dim3(static_cast<unsigned>(p.num_tokens)), dim3(kThreads), shared_bytes};
  if (p.input_type == ElementType::kBF16)
    return LaunchDependent(CompressorTreeKernel<kThreads, __nv_bfloat16>, tree_shape, stream, p);
  return LaunchDependent(CompressorTreeKernel<kThreads, float>, tree_shape, stream, p);
}

}  // namespace

cudaError_t LaunchCompressorStep(const CompressorStepParams& p, cudaStream_t stream) {
  if (p.batch <= 0 && (p.tree_rows == nullptr || p.num_tokens <= 0)) return cudaSuccess;
  if (p.dim <= 0 || p.dim > kCompressorMaxDim || p.ratio <= 0 || (p.coff != 1 && p.coff != 2) || p.page_size <= 0 ||
      p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dim)
    return cudaErrorInvalidValue;
  // One thread per channel up to 256 (the widths of one warp, two, four and eight).
  if (p.dim <= 32) return LaunchThreads<32>(p, stream);
  if (p.dim <= 64) return LaunchThreads<64>(p, stream);
  if (p.dim <= 128) return LaunchThreads<128>(p, stream);
  return LaunchThreads<256>(p, stream);
}

}  // namespace peregrine::kernels
