// The host plan of one DeepSeek-V4 forward step on a device backend: every per-token and
// per-chunk index the kernels read, computed once per step and uploaded in one copy. Host
// code only (no CUDA headers), so it is unit-tested on any machine.
//
// Device state layout it plans against (per layer, owned by the CUDA model):
//   window rows  [num_slots * W + max_tokens, Dh]: slot s's ring is rows s*W .. s*W+W-1
//                (position p at s*W + p % W); the step's new rows come after the rings, one
//                per token (row num_slots*W + t), so a chunk's tokens never overwrite rows
//                that its own earlier tokens still read. After attention the last min(T, W)
//                rows of each chunk move into the ring (ring_src -> ring_dst).
//   compressed   one page per slot holding all its entries: page_table[t] = slot of token t.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "config/model_config.h"

namespace peregrine::deepseek_v4 {

// One sequence's part of a step.
struct StepChunk {
  int32_t slot = 0;                // its state slot, [0, num_slots)
  int64_t first_position = 0;      // 0 (re)starts the sequence
  std::span<const int32_t> tokens; // [T]
  bool needs_logits = false;       // the last token's logits are wanted
  bool all_logits = false;         // every token's logits are wanted (tests, scoring)
  // >= 0: the last token is not known on the host yet; the device reads it from the previous
  // step's sampled tokens at this index when the step runs (tokens.back() is a placeholder).
  int32_t fed_from = -1;
};

struct StepPlan {
  int64_t num_tokens = 0;  // N: the rows of every per-token array below
  int64_t num_chunks = 0;  // B
  std::vector<int32_t> token_ids;       // [N]
  std::vector<int32_t> positions;       // [N]
  std::vector<int32_t> token_slots;     // [N] the page table of the compressed caches
  std::vector<int32_t> window_indices;  // [N, W] rows of the window buffer, -1 padded
  std::vector<int32_t> window_lengths;  // [N] min(pos + 1, W)
  std::vector<int32_t> ring_src;        // [N] scratch rows to keep, -1 padded
  std::vector<int32_t> ring_dst;        // [N] their ring rows
  std::vector<int32_t> csa_entries;     // [N] (pos + 1) / csa_ratio: entries visible to the token
  std::vector<int32_t> hca_entries;     // [N] (pos + 1) / hca_ratio
  std::vector<int32_t> chunk_offsets;   // [B + 1] first row of each chunk
  std::vector<int32_t> chunk_positions; // [B] the chunk's first position
  std::vector<int32_t> chunk_slots;     // [B]
  std::vector<int32_t> logit_rows;      // [R] rows whose logits are wanted, in row order
  // KV rows each token's attention reads, per layer kind (the attention work planner's input).
  std::vector<int64_t> sliding_rows;    // [N] window
  std::vector<int64_t> csa_rows;        // [N] window + min(topk, csa entries)
  std::vector<int64_t> hca_rows;        // [N] window + hca entries
  int64_t max_csa_entries = 0;          // over the step: sizes the indexer's score rows
};

struct StepLimits {
  int64_t num_slots = 0;
  int64_t max_tokens = 0;  // rows per step (the scratch rows after the rings)
  int64_t max_context = 0; // positions per sequence
};

// InvalidArgument when a chunk is empty, a slot is out of range or used twice, the step has
// more than max_tokens tokens, or a sequence would pass max_context.
Result<StepPlan> PlanStep(std::span<const StepChunk> chunks, const ModelConfig& config, const StepLimits& limits);

}  // namespace peregrine::deepseek_v4
