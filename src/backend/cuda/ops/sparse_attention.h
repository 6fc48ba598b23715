// Sparse MQA decode attention over the window ring cache and the paged compressed cache,
// with attention sinks and the output's inverse RoPE (kernels/sparse_attention.cuh has the
// exact semantics). The schedule comes from PlanSparseAttention.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"
#include "kernels/sparse_attention.cuh"

namespace peregrine::cuda {

struct SparseAttentionArgs {
  Tensor q;                   // [B, H, D] bf16 (normed, rotated)
  Tensor window_kv;           // [Nw, D] bf16: every request's window ring rows
  Tensor window_indices;      // [B, Kw] i32 rows of window_kv, -1 = skip
  Tensor window_lengths;      // [B] i32 valid prefix of window_indices
  Tensor compressed_kv;       // [num_pages, P, D] bf16; absent on window-only layers. Or [num_pages, P,
                              //   KvFp8RowLayout{D, entry_rope_dim}.row_bytes()] u8: V4's FP8 rows
                              //   (kernels/common/kv_fp8_row.h), staged_kv likewise
  int64_t entry_rope_dim = 0; // FP8 entries: their bf16 rope dims (multiples of 8, as is D - it)
  Tensor page_table;          // [T, max_pages] i32 (with compressed_kv)
  Tensor page_table_rows;     // [B] i32: request b's row of page_table; absent = row b (T = B)
  Tensor compressed_indices;  // [B, Kc] i32 entry numbers, -1 = skip; absent = entries 0..len-1
  Tensor compressed_lengths;  // [B] i32 (with compressed_kv)
  // Draft trees (kernels/common/staged_entries.h): entries e >= staged_first[b] are rows
  // staged_table[b, e - staged_first[b]] of staged_kv. All three absent: none.
  Tensor staged_kv;           // [R, D] bf16 (u8 FP8 rows with FP8 entries)
  Tensor staged_first;        // [B] i32
  Tensor staged_table;        // [B, Ks] i32
  Tensor sink;                // [H] f32
  Tensor positions;           // [B] i32 query positions (for the inverse RoPE)
  Tensor rope_cos;            // [num_positions, rope_dim / 2] f32; absent = no inverse RoPE
  Tensor rope_sin;            // [num_positions, rope_dim / 2] f32
  int64_t rope_dim = 0;
  float scale = 1.0f;         // softmax scale, D^-1/2 for DeepSeek-V4
  Tensor schedule;            // [layout.num_ints()] i32 from PlanSparseAttention
  kernels::SparseAttentionScheduleLayout layout;
  Tensor partial_o;           // [layout.max_segments, H, D] f32 workspace
  Tensor partial_lse;         // [layout.max_segments, H] f32 workspace
  Tensor out;                 // [B, H, D] bf16
};

// Prepares the kernels on the current device (their shared memory limit). Once per device,
// before the first SparseAttentionDecode and outside graph capture.
Status PrepareSparseAttention();

// InvalidArgument for bad tensors, an (H, D) that is not built (kSparseAttentionConfigs) or
// a batch over the layout; Internal when a launch fails (InvalidValue from the launch
// usually means PrepareSparseAttention was not called on this device). Asynchronous on `stream`.
Status SparseAttentionDecode(const SparseAttentionArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
