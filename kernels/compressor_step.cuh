// The DeepSeek-V4 KV compressor for a batch of requests, each appending one or more
// consecutive tokens: the same kernel serves decode (one token per request) and prefill
// chunks (a run of tokens per request).
//
// Request b's tokens are rows [token_offsets[b], token_offsets[b + 1]) of kv and gate (row b
// alone when token_offsets is null), at positions positions[b], positions[b] + 1, ... Each
// token in turn is appended to the request's state ring; when a token completes a block
// ((pos + 1) % ratio == 0) the block is pooled into compressed entry
// k = (pos + 1) / ratio - 1: a per-channel softmax over the block's gate rows weights its kv
// rows (with overlap, coff = 2, the 2*ratio slots are the previous block's first-half
// channels and this block's second-half channels; block 0 has no previous slots), then
// RMSNorm(weight), then RoPE at position pos + 1 - ratio on the trailing rope dims, and the
// entry is written to the paged cache at page_table[k / page_size], slot k % page_size: in
// bf16, or with cache_fp8 as V4's FP8 row (kernels/common/kv_fp8_row.h: e4m3 blocks of 64
// with UE8M0 scales, the rope dims in bf16; a row of KvFp8RowLayout{dim, rope_dim}.row_bytes()
// bytes).
//
// State ring layout, per state slot, fp32, rows of coff*dim:
//   coff = 1: row = pos % ratio
//   coff = 2: row = ((pos / ratio) % 2) * ratio + pos % ratio   (blocks alternate halves, so the
//             previous block is still there when the current one completes)
// gate rows are stored with `ape[pos % ratio]` already added. Feeding a request's tokens in
// one launch or one per launch leaves the same state and cache.
//
// Prefix-cache snapshots (optional): when a token completes a block that ends on a multiple
// of snapshot_interval, the ring rows of that block (ratio rows of kv and of gate, full
// width) are copied into record snapshot_table[b, i] for the request's i-th such boundary
// after positions[b] (i = (pos + 1) / interval - positions[b] / interval - 1): what the
// overlap of the next block reads, so a request that starts at that boundary can restore it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/element_type.h"

namespace peregrine::kernels {

struct CompressorStepParams {
  const void* kv;               // [num_tokens, coff*dim] input_type
  const void* gate;             // [num_tokens, coff*dim] input_type (without ape)
  const int32_t* token_offsets; // [B + 1] request b's rows of kv/gate, or null for row b alone
  const float* ape;             // [ratio, coff*dim]
  float* kv_state;              // [num_state_slots, coff*ratio, coff*dim]
  float* gate_state;            // [num_state_slots, coff*ratio, coff*dim]
  const int32_t* state_slots;   // [B]; a negative slot skips the request
  const int32_t* positions;     // [B] position of the request's first token; negative skips it
  const float* norm_weight;     // [dim]
  const float* rope_cos;        // [num_positions, rope_dim / 2]
  const float* rope_sin;        // [num_positions, rope_dim / 2]
  void* cache;                  // [num_cache_rows, dim] bf16, or FP8 rows (cache_fp8)  (pages * page_size rows)
  bool cache_fp8 = false;       // cache and stage_entries hold FP8 rows
  const int32_t* page_table;    // [num_page_tables, max_pages]
  const int32_t* page_table_rows = nullptr;  // [B] row of page_table per request; null: row b
  int batch = 0;
  int num_tokens = 0;  // rows of kv and gate (token offsets are clamped to it)
  int dim = 0;
  int ratio = 0;
  int coff = 1;
  int rope_dim = 0;
  int num_positions = 0;
  int num_state_slots = 0;
  int page_size = 0;
  int max_pages = 0;
  int num_page_tables = 0;  // rows of page_table
  int64_t num_cache_rows = 0;
  float eps = 1e-6f;
  // Snapshots (null snapshot_table: none).
  float* snapshot_kv = nullptr;             // record r: [ratio, coff*dim] at snapshot_kv + r * snapshot_stride
  float* snapshot_gate = nullptr;           // same
  int64_t snapshot_stride = 0;              // floats between records
  const int32_t* snapshot_table = nullptr;  // [B, max_snapshots] record per boundary, -1: none
  int max_snapshots = 0;
  int snapshot_interval = 0;
  int num_snapshots = 0;                    // records
  ElementType input_type = ElementType::kF32;
  // Draft-tree nodes (null tree_rows: none; docs/decisions/0010-device-draft-trees.md). Row t
  // with tree_rows[t] = s >= 0 is a node at tree_positions[t] of slot tree_slots[t], whose
  // path (its ancestors' step rows by depth, root first, t itself last) is row t of
  // tree_paths. It writes no slot state: its own ring row (kv, gate with ape) goes to row s of
  // stage_kv / stage_gate, and the entry of a block it completes to row s of stage_entries,
  // pooled over the committed ring for positions below the root and its path's rows above.
  // The sequential part of the launch skips tree chunks by their negative state slot.
  const int32_t* tree_rows = nullptr;       // [num_tokens]
  const int32_t* tree_paths = nullptr;      // [num_tokens, path_capacity]
  const int32_t* tree_slots = nullptr;      // [num_tokens]
  const int32_t* tree_positions = nullptr;  // [num_tokens]
  int path_capacity = 0;
  float* stage_kv = nullptr;                // [num_stage_rows, coff*dim]
  float* stage_gate = nullptr;              // [num_stage_rows, coff*dim]
  void* stage_entries = nullptr;            // [num_stage_rows, dim] bf16, or FP8 rows (cache_fp8)
  int num_stage_rows = 0;
};

// Largest entry width (the pooled entry is staged in shared memory).
inline constexpr int kCompressorMaxDim = 8192;

// One CTA per request (grid = batch), its tokens in order; then, with tree_rows, one CTA per
// row of kv (the tree nodes' staging). Any dim in [1, kCompressorMaxDim].
cudaError_t LaunchCompressorStep(const CompressorStepParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
