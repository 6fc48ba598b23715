// Which prompt prefixes a worker has seen lately (the router's cache-aware policy): the text
// is cut into fixed chunks, each chunk keyed by a hash chained over every chunk before it (as
// the KV cache keys its blocks), and a bounded LRU set of keys stands for what the worker's
// prefix cache probably still holds. Approximate on purpose: a collision or an eviction only
// moves a request to another worker, never changes its answer. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace peregrine::router {

inline constexpr size_t kPrefixChunkBytes = 64;

// The chained keys of every full chunk of `text` (a last partial chunk is keyed too, so short
// prompts still match).
std::vector<uint64_t> PrefixKeys(std::string_view text);

class PrefixIndex {
 public:
  explicit PrefixIndex(size_t max_keys) : max_keys_(max_keys) {}

  // Leading keys of `keys` present (most recent use refreshed).
  size_t Match(const std::vector<uint64_t>& keys);
  // Records every key, evicting the least recently used past max_keys.
  void Insert(const std::vector<uint64_t>& keys);
  size_t size() const { return by_key_.size(); }

 private:
  size_t max_keys_;
  std::list<uint64_t> lru_;  // least recently used first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> by_key_;
};

}  // namespace peregrine::router
