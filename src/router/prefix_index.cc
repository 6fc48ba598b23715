#include "router/prefix_index.h"

namespace peregrine::router {

namespace {

// FNV-1a over the chunk, seeded with the previous key: a key names its whole prefix.
uint64_t Chain(uint64_t previous, std::string_view chunk) {
  uint64_t h = 1469598103934665603ULL ^ (previous * 0x9e3779b97f4a7c15ULL);
  for (char c : chunk) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

std::vector<uint64_t> PrefixKeys(std::string_view text) {
  std::vector<uint64_t> keys;
  uint64_t key = 0;
  for (size_t at = 0; at < text.size(); at += kPrefixChunkBytes) {
    key = Chain(key, text.substr(at, kPrefixChunkBytes));
    keys.push_back(key);
  }
  return keys;
}

size_t PrefixIndex::Match(const std::vector<uint64_t>& keys) {
  size_t n = 0;
  for (uint64_t k : keys) {
    auto it = by_key_.find(k);
    if (it == by_key_.end()) break;
    lru_.splice(lru_.end(), lru_, it->second);
    ++n;
  }
  return n;
}

void PrefixIndex::Insert(const std::vector<uint64_t>& keys) {
  for (uint64_t k : keys) {
    auto it = by_key_.find(k);
    if (it != by_key_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      continue;
    }
    lru_.push_back(k);
    by_key_.emplace(k, std::prev(lru_.end()));
  }
  while (by_key_.size() > max_keys_) {
    by_key_.erase(lru_.front());
    lru_.pop_front();
  }
}

}  // namespace peregrine::router
