#include "tokenizer/word_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace peregrine::tokenizer {

WordCache::WordCache(size_t max_entries)
    : max_entries_(max_entries), slots_(std::bit_ceil(max_entries * 2)) {}

uint64_t WordCache::Hash(std::string_view word) {
  // 8 bytes per multiply-xorshift round; plenty for short words in a table we control.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = word.size() * kMul;
  const char* p = word.data();
  size_t n = word.size();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * kMul;
    h ^= h >> 29;
  }
  return h * kMul;
}

const int32_t* WordCache::Find(std::string_view word, uint64_t hash, size_t* num_ids) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key_size == 0) return nullptr;
    if (s.hash_check == static_cast<uint32_t>(hash >> 32) && s.key_size == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      *num_ids = s.num_ids;
      return ids_.data() + s.ids_offset;
    }
  }
}

void WordCache::Insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
  if (word.empty() || word.size() >= kMaxWordBytes) return;
  if (num_entries_ >= max_entries_) Clear();
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].key_size != 0) i = (i + 1) & mask;
  Slot& s = slots_[i];
  s.hash_check = static_cast<uint32_t>(hash >> 32);
  s.key_offset = static_cast<uint32_t>(keys_.size());
  s.key_size = static_cast<uint16_t>(word.size());
  s.ids_offset = static_cast<uint32_t>(ids_.size());
  s.num_ids = static_cast<uint16_t>(ids.size());
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++num_entries_;
}

void WordCache::Clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  num_entries_ = 0;
}

}  // namespace peregrine::tokenizer
