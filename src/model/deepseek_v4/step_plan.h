// The host plan of one DeepSeek-V4 forward step on a device backend: every per-token and
// per-chunk index the kernels read, computed once per step and uploaded in one copy. Host
// code only (no CUDA headers), so it is unit-tested on any machine.
//
// Device state layout it plans against (per layer, kv_geometry.h):
//   window rows  [num_slots * W + max_tokens, Dh]: slot s's ring is rows s*W .. s*W+W-1
//                (position p at s*W + p % W); the step's new rows come after the rings, one
//                per token (row num_slots*W + t), so a chunk's tokens never overwrite rows
//                that its own earlier tokens still read. After attention the last min(T, W)
//                rows of each chunk move into the ring (ring_src -> ring_dst).
//   compressed   pages of the paged kinds, addressed through the slot's row of the
//                persistent block tables (page_table_rows = the token's or chunk's slot).
//   snapshots    chunk b's i-th block boundary writes snapshot_table[b, i] (-1: none).
//
// Speculative verify (a chunk with ChunkView::tree_parents: a draft tree, a chain being the
// tree with one node per depth; docs/decisions/0010-device-draft-trees.md): node i runs at
// position first_position + its depth and writes no slot state. Its window rows stay in the
// step's rows, and its window list reads the ring below the root and its own path's rows
// (never a sibling's). Each node has a staging row (tree_rows): the compressors put its ring
// rows and the entries it completes there, pooled over the committed ring and its path
// (tree_paths), and attention and the indexer read the entries its ancestors completed from
// the staging rows (the staged tables) instead of the pools. After acceptance the model
// copies the accepted path's window rows, ring rows and entries into the slot, so rejected
// nodes leave nothing behind and nothing is recomputed. A verify chunk passes no block
// boundary that takes a snapshot.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "config/model_config.h"
#include "model/step_view.h"

namespace peregrine::deepseek_v4 {

struct StepPlan {
  int64_t num_tokens = 0;  // N: the rows of every per-token array below
  int64_t num_chunks = 0;  // B
  std::vector<int32_t> token_ids;       // [N] (a fed chunk's last token: 0 until the device feeds it)
  std::vector<int32_t> positions;       // [N]
  std::vector<int32_t> token_slots;     // [N] the block-table row of each token
  std::vector<int32_t> window_indices;  // [N, W] rows of the window buffer, -1 padded
  std::vector<int32_t> window_lengths;  // [N] min(pos + 1, W)
  std::vector<int32_t> ring_src;        // [N] scratch rows to keep, -1 padded
  std::vector<int32_t> ring_dst;        // [N] their ring rows
  std::vector<int32_t> csa_entries;     // [N] (pos + 1) / csa_ratio: entries visible to the token
  std::vector<int32_t> hca_entries;     // [N] (pos + 1) / hca_ratio
  std::vector<int32_t> chunk_offsets;   // [B + 1] first row of each chunk
  std::vector<int32_t> chunk_positions; // [B] the chunk's first position
  std::vector<int32_t> chunk_slots;     // [B]
  int64_t max_snapshots = 1;            // S: boundaries a chunk of this step can pass
  std::vector<int32_t> snapshot_table;  // [B, S]
  std::vector<int32_t> logit_rows;      // [R] rows whose logits are wanted, in row order
  // Draft trees (empty, and capacities 0, when the step verifies none).
  std::vector<int32_t> tree_rows;       // [N] a verify node's staging row, else -1
  int64_t num_stage_rows = 0;
  int64_t path_capacity = 0;            // L = StepLimits::max_tree_depth + 1
  std::vector<int32_t> tree_paths;      // [N, L] a node's path: step rows by depth (root first), -1 padded
  std::vector<int32_t> compress_slots;  // [B] the chunk's slot, -1 for verify chunks (the sequential compressor skips them)
  int64_t csa_staged_capacity = 0;      // L / csa_ratio + 1
  int64_t hca_staged_capacity = 0;      // L / hca_ratio + 1
  std::vector<int32_t> csa_staged_first;  // [N] the first entry read from staging (>= csa_entries: none)
  std::vector<int32_t> csa_staged;        // [N, csa_staged_capacity] staging rows of entries from csa_staged_first on
  std::vector<int32_t> hca_staged_first;  // [N]
  std::vector<int32_t> hca_staged;        // [N, hca_staged_capacity]
  struct Verify {
    int64_t chunk = 0;             // index in the step's chunks
    int64_t first_row = 0;         // its root's token row
    int64_t first_stage_row = 0;   // its root's staging row (node i: + i)
  };
  std::vector<Verify> verify_chunks;
  // KV rows each token's attention reads, per layer kind (the attention work planner's input).
  std::vector<int64_t> sliding_rows;    // [N] window
  std::vector<int64_t> csa_rows;        // [N] window + min(topk, csa entries)
  std::vector<int64_t> hca_rows;        // [N] window + hca entries
  int64_t max_csa_entries = 0;          // over the step: sizes the indexer's score rows
  int64_t max_chunk_tokens = 0;
};

struct StepLimits {
  int64_t num_slots = 0;
  int64_t max_tokens = 0;    // rows per step (the scratch rows after the rings)
  int64_t max_context = 0;   // positions per sequence
  int64_t block_tokens = 0;  // KV block size (snapshot boundaries)
  int64_t num_blocks = 0;    // block ids are in [0, num_blocks)
  int64_t num_snapshots = 0; // snapshot ids are in [0, num_snapshots)
  int64_t first_entry_tokens = 1;  // KvLayout::first_entry_tokens (block coverage)
  int64_t max_stage_rows = 0;      // verify nodes per step (0: no speculative verify)
  int64_t max_tree_depth = 0;      // a verify node's depth below its root
};

// The snapshots table width for chunks of up to `max_chunk_tokens` tokens.
int64_t MaxSnapshotsPerChunk(int64_t max_chunk_tokens, int64_t block_tokens);

// InvalidArgument when a chunk is malformed (empty, tokens and length disagree, feeds_last on
// an empty chunk), a slot is out of range or used twice, the step has more than max_tokens
// tokens, a sequence would pass max_context, a block table does not cover the chunk or names
// a block outside the pools, or a snapshot or restore is out of place.
Result<StepPlan> PlanStep(std::span<const ChunkView> chunks, const ModelConfig& config, const StepLimits& limits);

}  // namespace peregrine::deepseek_v4
