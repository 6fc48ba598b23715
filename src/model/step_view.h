// One step of a model as the runtime hands it over: per sequence, the tokens to run at which
// positions, its per-request slot, its block table and the snapshots to write or restore
// (model/kv_layout.h says what those hold). Backend-neutral and host-only.
#pragma once

#include <cstdint>
#include <span>

namespace peregrine {

struct ChunkView {
  int32_t slot = 0;                     // the sequence's per-request state
  int64_t first_position = 0;           // 0 (re)starts the sequence
  int64_t num_tokens = 0;               // T
  std::span<const int32_t> tokens;      // the known tokens: all T, or T - 1 when feeds_last
  // The last token is the one the previous launched step sampled for this slot; the device
  // reads it from the runner's token buffer when the step runs (runners that overlap steps).
  bool feeds_last = false;
  std::span<const int32_t> blocks;      // block table: covers every entry the chunk completes
  // One per block boundary L in (first_position, first_position + T], in order: the snapshot
  // to write the state at L into, or -1.
  std::span<const int32_t> snapshots;
  int32_t restore = -1;                 // >= 0: start the slot from this snapshot (taken at first_position)
  bool needs_logits = false;            // the last token's logits are wanted (it is sampled)
  // Every token's logits are wanted (T rows; scoring, tests), whatever needs_logits says.
  bool all_logits = false;

  // The chunk's rows in a step's logits: every token's with all_logits, else the last one's
  // when it needs logits (then that last row is the sampled one).
  int64_t logit_rows() const { return all_logits ? num_tokens : (needs_logits ? 1 : 0); }
};

}  // namespace peregrine
