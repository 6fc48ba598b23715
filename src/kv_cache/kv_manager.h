// The KV bookkeeping of the running requests (host only, no device code): which request
// holds which per-request slot, which blocks (its block table) and which prefix-cache
// entries. The backend maps slot and block ids to its own storage (KvLayout says what a
// slot and a block hold).
//
// Blocks are taken as the request's entries complete (KvLayout::BlocksFor) and returned on
// free. With prefix caching, every full block is keyed by the hash chain of its prefix
// (block_hash.h) once its tokens are known; a snapshot of the per-request state is written
// at each block boundary a request crosses (when the snapshot pool has room) and keyed like
// the block it ends. A new request starts from the longest cached prefix that ends at a
// keyed snapshot (and leaves its last token to compute): it shares those blocks read-only,
// its slot is restored from the snapshot, and its computation starts at the boundary.
//
// Mutations come in can_X / X pairs; X on a state that fails can_X is a broken invariant.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv_cache/block_hash.h"
#include "kv_cache/block_pool.h"
#include "model/kv_layout.h"

namespace peregrine {

struct KvCacheConfig {
  KvLayout layout;
  int32_t num_slots = 64;      // requests that can hold per-request state at once
  int32_t num_blocks = 0;      // blocks of the paged kinds
  int32_t num_snapshots = 0;   // block-boundary snapshots (prefix caching)
  bool enable_prefix_caching = false;  // needs layout.can_snapshot() and num_snapshots > 0
};

struct RequestKv {
  int32_t slot = -1;
  int64_t num_tokens = 0;           // tokens whose KV is held or being computed
  std::vector<int32_t> blocks;      // block j covers tokens [j * block_tokens, (j + 1) * block_tokens)
  int64_t num_cached_tokens = 0;    // found in the prefix cache at admission
  int32_t restore = -1;             // snapshot the slot starts from, until the first chunk takes it
  // Prefix-cache keys.
  BlockHash root{};
  BlockHash last_key{};             // key of block num_keyed_blocks - 1
  int64_t num_keyed_blocks = 0;
  std::vector<std::pair<int64_t, int32_t>> written;  // (boundary in blocks, snapshot) not keyed yet
  int32_t held_restore = -1;        // the restore snapshot, held until the step that read it is committed
};

class KvManager {
 public:
  explicit KvManager(const KvCacheConfig& config);

  bool prefix_caching() const { return caching_; }
  int64_t block_tokens() const { return config_.layout.block_tokens; }

  bool can_admit() const { return !free_slots_.empty(); }
  // Admits a request whose context is `tokens` and returns the tokens it starts with from
  // the prefix cache (0 without a hit; a multiple of block_tokens, below tokens.size()).
  int64_t admit(int64_t request, std::span<const int32_t> tokens, std::string_view cache_salt = {});
  // Room for `num_new` more tokens of an admitted request.
  bool can_append(int64_t request, int64_t num_new) const;
  // Takes the blocks for `num_new` more tokens. `snapshots` (may be null) gets one entry per
  // block boundary the new tokens reach, in order (the first is the first boundary after the
  // old num_tokens): the snapshot to write there, or -1.
  void append(int64_t request, int64_t num_new, std::vector<int32_t>* snapshots = nullptr);
  // Gives back what was taken for tokens past the first `num_tokens` (a speculative step
  // reserved room for drafts that were rejected): blocks beyond BlocksFor(num_tokens) and
  // the snapshots of boundaries past num_tokens. No-op when the request holds no more.
  void truncate(int64_t request, int64_t num_tokens);
  // The snapshot the request's first chunk restores its slot from (-1: none); taken once.
  int32_t take_restore(int64_t request);
  // After a step was launched or its tokens arrived: keys the request's full blocks whose
  // tokens are known (`known` = its context so far) and the snapshots that end them, and lets
  // go of a restore snapshot that a launched step has read.
  void commit(int64_t request, std::span<const int32_t> known);
  // Frees everything the request holds (no-op for unknown requests); cached blocks stay
  // readable until evicted.
  void free(int64_t request);

  bool holds(int64_t request) const { return requests_.count(request) != 0; }
  const RequestKv& get(int64_t request) const;
  // Whether a request of `num_tokens` could ever fit in an empty cache.
  bool fits_when_empty(int64_t num_tokens) const;
  // Fraction of blocks in use (cached blocks nobody holds count as free, as they are reclaimable).
  double usage() const;
  // Tokens of context the blocks hold.
  int64_t capacity_tokens() const;
  int32_t num_free_blocks() const { return blocks_.num_free(); }
  int32_t num_cached_blocks() const { return blocks_.num_cached(); }
  int32_t num_cached_snapshots() const { return snapshots_.num_cached(); }
  const KvCacheConfig& config() const { return config_; }

 private:
  int32_t BlocksNeeded(const RequestKv& kv, int64_t num_new) const;

  KvCacheConfig config_;
  bool caching_ = false;
  BlockPool blocks_;
  BlockPool snapshots_;
  std::vector<int32_t> free_slots_;
  std::unordered_map<int64_t, RequestKv> requests_;
};

}  // namespace peregrine
