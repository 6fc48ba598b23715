// Sparse MQA decode attention over two caches (DeepSeek-V4 window + compressed rows), with
// an attention sink per head and the inverse RoPE of the output fused.
//
// For request b the key/value rows (K = V) are, in this order:
//   rows [0, wl):        window_kv[window_indices[b, r]]                   wl = window_lengths[b]
//   rows [wl, wl + cl):  compressed_kv[page_table[b, e / P] * P + e % P]    cl = compressed_lengths[b]
//                        with e = compressed_indices[b, r - wl], or e = r - wl when there is no
//                        index list (all visible entries, HCA); an entry the staged table
//                        covers (common/staged_entries.h) is its staging row instead
// A negative index (list padding) or one out of range masks its row. Then, per head h,
//   s_j = scale * q[b, h] . row_j
//   o   = sum_j exp(s_j) row_j / (sum_j exp(s_j) + exp(sink[h]))
//   out[b, h] = o with the inverse rotation at positions[b] on its trailing rope_dim dims.
//
// Work split: a host-planned schedule (sparse_attention_plan.h) hands each of a fixed number
// of CTAs a contiguous run of 64-row tiles over the batch's concatenated rows, so short
// batches still fill every SM. A request done by one CTA is written directly; a split one
// leaves per-CTA partial results (normalised o and log2-sum-exp) that the combine kernel
// merges with the sink. Both launches read only device buffers, so they can be captured.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/host_device.h"
#include "kernels/common/staged_entries.h"

namespace peregrine::kernels {

// Rows of the KV list one CTA processes per step.
inline constexpr int kSparseAttentionBlockN = 64;

// Schedule buffer (int32), for num_ctas CTAs, max_segments segments and max_batch requests:
//   [0, num_ctas]                    first segment of each CTA (num_ctas + 1 entries)
//   then max_segments x 4            segments {request, row_begin, row_end, partial slot or -1}
//   then max_batch x 2               per request {first partial slot, number of slots}; the
//                                    count is -1 when one CTA wrote the output directly
//   then 1 + max_batch               the requests the combine kernel finishes: their count,
//                                    then their indices (split requests and empty ones)
struct SparseAttentionScheduleLayout {
  int num_ctas = 0;
  int max_segments = 0;
  int max_batch = 0;

  PG_HOST_DEVICE constexpr int segments_offset() const { return num_ctas + 1; }
  PG_HOST_DEVICE constexpr int requests_offset() const { return segments_offset() + 4 * max_segments; }
  PG_HOST_DEVICE constexpr int combine_offset() const { return requests_offset() + 2 * max_batch; }
  PG_HOST_DEVICE constexpr int num_ints() const { return combine_offset() + 1 + max_batch; }
};

struct SparseAttentionParams {
  const __nv_bfloat16* q;              // [B, H, D]
  const __nv_bfloat16* window_kv;      // [num_window_rows, D]
  const int32_t* window_indices;       // [B, window_capacity]
  const int32_t* window_lengths;       // [B]
  const void* compressed_kv;           // [num_compressed_rows, D] bf16 (pages * page_size rows); may be null
  // With entries_fp8 the compressed rows and the staged ones are V4's FP8 rows
  // (kernels/common/kv_fp8_row.h, KvFp8RowLayout{D, entry_rope_dim}), read as the bf16 values
  // they dequantise to (kernels/common/kv_fp8_load.cuh): the output is the one over bf16 rows
  // holding those values. Needs D - entry_rope_dim and entry_rope_dim multiples of 8.
  bool entries_fp8 = false;
  int entry_rope_dim = 0;
  const int32_t* page_table;           // [num_page_tables, max_pages]
  const int32_t* page_table_rows = nullptr;  // [B] row of page_table per request; null: row b
  const int32_t* compressed_indices;   // [B, compressed_capacity], or null for "all entries"
  const int32_t* compressed_lengths;   // [B]
  StagedEntries staged;                // entries read from staging rows instead (draft trees)
  const float* sink;                   // [H]
  const int32_t* positions;            // [B]
  const float* rope_cos;               // [num_positions, rope_dim / 2], or null for no inverse RoPE
  const float* rope_sin;               // [num_positions, rope_dim / 2]
  const int32_t* schedule;             // [layout.num_ints()]
  float* partial_o;                    // [max_segments, H, D]
  float* partial_lse;                  // [max_segments, H]  (log2 units)
  __nv_bfloat16* out;                  // [B, H, D]
  int batch = 0;
  int heads = 0;
  int head_dim = 0;
  int64_t num_window_rows = 0;
  int window_capacity = 0;
  int64_t num_compressed_rows = 0;
  int page_size = 1;
  int max_pages = 0;
  int num_page_tables = 0;  // rows of page_table
  int compressed_capacity = 0;
  int rope_dim = 0;
  int num_positions = 0;
  float scale = 1.0f;  // softmax scale (1/sqrt(D) for DeepSeek-V4)
  SparseAttentionScheduleLayout layout;
};

struct SparseAttentionConfig {
  int heads;
  int head_dim;
};
// (H, D) pairs the kernels are built for: DeepSeek-V4-Flash's 64 x 512 whole and per rank at
// tensor-parallel 2, 4 and 8, and small ones (the test fixtures whole and at TP 2).
inline constexpr SparseAttentionConfig kSparseAttentionConfigs[] = {{64, 512}, {32, 512}, {16, 512}, {8, 512},
                                                                    {64, 64},  {8, 64},   {4, 64}};

// Dynamic shared memory the main kernel needs for (heads, head_dim), 0 if unsupported.
int SparseAttentionSharedBytes(int heads, int head_dim);

// Raises the dynamic shared memory limit of every built configuration on the current device.
// Call once per device before the first launch (not inside graph capture or a hot loop:
// setting a function attribute can wait for in-flight copies).
cudaError_t PrepareSparseAttention();

// Launches the attention kernel (grid = layout.num_ctas) and then the combine kernel (a
// fixed grid of 4 * layout.num_ctas CTAs whose warps take the (request, head, 128-dim chunk)
// items it must finish).
cudaError_t LaunchSparseAttention(const SparseAttentionParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
