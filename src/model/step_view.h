// One step of a model as the runtime hands it over: per sequence, the tokens to run at which
// positions, its per-request slot, its block table and the snapshots to write or restore
// (model/kv_layout.h says what those hold). Backend-neutral and host-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

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
  // Speculative verify: the T tokens are a draft tree, tree_parents[i] < i its parents (-1
  // for the root, token 0, at first_position), node i at first_position + its depth. Every
  // node's logits are wanted (as all_logits); the slot's state does not advance until the
  // runner keeps one root path (HostModel::CommitTree), whose block boundaries take
  // `snapshots` (one per boundary the deepest node reaches). Empty: consecutive tokens.
  std::span<const int32_t> tree_parents;
  // The drafter reads this step's final hidden states afterwards (HostModel::Draft).
  bool keep_hidden = false;

  // The chunk's rows in a step's logits: every token's with all_logits, else the last one's
  // when it needs logits (then that last row is the sampled one).
  int64_t logit_rows() const {
    return all_logits || !tree_parents.empty() ? num_tokens : (needs_logits ? 1 : 0);
  }
  // Positions the chunk's deepest token reaches past first_position, plus one (T without a tree).
  int64_t span() const {
    if (tree_parents.empty()) return num_tokens;
    int64_t deepest = 0;
    std::vector<int64_t> depth(tree_parents.size(), 0);
    for (size_t i = 1; i < tree_parents.size(); ++i) {
      const int32_t p = tree_parents[i];
      depth[i] = p >= 0 && static_cast<size_t>(p) < i ? depth[static_cast<size_t>(p)] + 1 : 0;
      deepest = std::max(deepest, depth[i]);
    }
    return deepest + 1;
  }
};

}  // namespace peregrine
