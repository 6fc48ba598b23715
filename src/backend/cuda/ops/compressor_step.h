// The DeepSeek-V4 KV compressor on the device (see kernels/compressor_step.cuh for the exact
// semantics and the state ring layout). One function serves decode (one token per request,
// token_offsets absent) and prefill chunks (a run of consecutive tokens per request).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct CompressorStepArgs {
  Tensor kv;             // [N, coff*Dc] bf16 or f32: the tokens' wkv projections
  Tensor gate;           // [N, coff*Dc] same dtype: their wgate projections (without ape)
  Tensor token_offsets;  // [B + 1] i32: request b's tokens are rows [token_offsets[b],
                         //   token_offsets[b + 1]) of kv/gate, consecutive positions from
                         //   positions[b]; absent = one token per request, row b (N = B)
  Tensor ape;            // [ratio, coff*Dc] f32
  Tensor kv_state;       // [S, coff*ratio, coff*Dc] f32, per-request rings (S state slots)
  Tensor gate_state;     // [S, coff*ratio, coff*Dc] f32
  Tensor state_slots;    // [B] i32, each request's ring; negative = skip
  Tensor positions;      // [B] i32, the position of the request's first token; negative = skip
  Tensor norm_weight;    // [Dc] f32
  Tensor rope_cos;       // [num_positions, rope_dim / 2] f32
  Tensor rope_sin;       // [num_positions, rope_dim / 2] f32
  Tensor cache;          // [num_pages, P, Dc] bf16, the compressed entries; or [num_pages, P,
                         //   KvFp8RowLayout{Dc, rope_dim}.row_bytes()] u8: V4's FP8 rows
                         //   (kernels/common/kv_fp8_row.h), stage_entries likewise
  Tensor page_table;     // [T, max_pages] i32, entry k lives at page_table[row, k / P], slot k % P
  Tensor page_table_rows;  // [B] i32: request b's row of page_table; absent = row b (T = B)
  int64_t ratio = 0;
  int64_t coff = 1;      // 2: overlapping blocks (CSA), 1: plain (HCA)
  int64_t rope_dim = 0;
  float eps = 1e-6f;
  // Snapshots at block boundaries (kernels/compressor_step.cuh); absent snapshot_table: none.
  // Records are raw device memory: record r's kv rows [ratio, coff*Dc] f32 at snapshot_kv +
  // r * snapshot_stride floats (gate rows likewise), r < num_snapshots.
  Tensor snapshot_table;   // [B, max_snapshots] i32, -1: no snapshot at that boundary
  float* snapshot_kv = nullptr;
  float* snapshot_gate = nullptr;
  int64_t snapshot_stride = 0;
  int64_t num_snapshots = 0;
  int64_t snapshot_interval = 0;  // tokens between snapshot boundaries (a multiple of ratio)
  // Draft-tree nodes (kernels/compressor_step.cuh): row t with tree_rows[t] = s >= 0 stages
  // its ring row into row s of stage_kv / stage_gate and a completed block's entry into row s
  // of stage_entries, writing no slot state; its chunk must be skipped by a negative state
  // slot. Needs token_offsets; absent tree_rows: no tree nodes.
  Tensor tree_rows;       // [N] i32, -1: not a node
  Tensor tree_paths;      // [N, L] i32: the node's path, step rows by depth (root first)
  Tensor tree_slots;      // [N] i32: the node's state slot (its committed ring)
  Tensor tree_positions;  // [N] i32: every row's position
  Tensor stage_kv;        // [num_stage_rows, coff*Dc] f32
  Tensor stage_gate;      // [num_stage_rows, coff*Dc] f32
  Tensor stage_entries;   // [num_stage_rows, Dc] bf16 (u8 FP8 rows with an FP8 cache)
};

// Appends every request's tokens, in order, and writes the entries of the blocks they
// complete: the same state and cache as feeding the tokens one call at a time.
// InvalidArgument for bad tensors or a Dc above kernels::kCompressorMaxDim; Internal when the
// launch fails. Asynchronous on `stream`; capture-safe (the grid is B, every offset and
// position is read on the device).
Status CompressorStep(const CompressorStepArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
