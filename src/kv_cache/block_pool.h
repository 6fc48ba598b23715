// BlockPool: fixed-size blocks of one id space, handed out by id, with reference counts and
// a cache of full blocks keyed by their prefix hash. Host bookkeeping only (the backend owns
// the bytes).
//
// A block is free, held (reference count > 0) or cached-unreferenced. A cached block that
// nobody holds stays readable until its id is needed: allocation takes a free id first and
// only then evicts the least recently released cached block (forgetting its key). Free ids
// are kept sorted and allocation prefers the id after the caller's last one, so a request's
// blocks form contiguous runs while the pool is not fragmented.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "kv_cache/block_hash.h"

namespace peregrine {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refs_.size()); }
  // Blocks an allocation can take now: free ones plus cached ones nobody holds.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_cached() const { return static_cast<int32_t>(by_hash_.size()); }
  int64_t num_evictions() const { return num_evictions_; }
  bool can_allocate(int32_t n) const { return n <= num_free(); }

  // A block held once by the caller: `after + 1` if free, else the lowest free id, else the
  // least recently released cached block. The caller must have checked can_allocate(1).
  int32_t allocate(int32_t after = -1);
  // The cached block keyed `hash`, or -1.
  int32_t find(const BlockHash& hash) const;
  // One more holder (a cached block nobody held leaves the eviction order).
  void acquire(int32_t id);
  // One holder less; at zero a cached block becomes evictable (most recently released last)
  // and an uncached one is free.
  void release(int32_t id);
  // Keys a held block; false (and the block stays unkeyed) when the key is cached already.
  bool cache(int32_t id, const BlockHash& hash);
  int32_t ref_count(int32_t id) const { return refs_[static_cast<size_t>(id)]; }
  bool is_cached(int32_t id) const { return hash_of_[static_cast<size_t>(id)].has_value(); }

 private:
  void Forget(int32_t id);

  std::vector<int32_t> refs_;
  std::vector<std::optional<BlockHash>> hash_of_;
  std::set<int32_t> free_;
  std::list<int32_t> lru_;  // cached, unreferenced; least recently released first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> by_hash_;
  int64_t num_evictions_ = 0;
};

}  // namespace peregrine
