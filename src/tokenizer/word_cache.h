// A bounded map from word bytes to the ids BPE produced for them, owned by one thread at a
// time (it lives in the encoder's per-thread scratch, so lookups take no lock).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::tokenizer {

class WordCache {
 public:
  // Words at least this long are not cached (they are rare and would crowd the arena).
  static constexpr size_t kMaxWordBytes = 256;

  explicit WordCache(size_t max_entries = 1 << 15);

  static uint64_t Hash(std::string_view word);

  // The cached ids of `word` (whose Hash is `hash`), or nullptr. `*num_ids` gets the count.
  const int32_t* Find(std::string_view word, uint64_t hash, size_t* num_ids) const;

  // Remembers ids for word; when full, forgets everything first (simple and bounded).
  void Insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids);

 private:
  // 16 bytes, so more of the table stays in cache.
  struct Slot {
    uint32_t hash_check = 0;  // high half of the hash
    uint32_t key_offset = 0;
    uint16_t key_size = 0;  // 0 marks an empty slot (empty words are never cached)
    uint16_t num_ids = 0;
    uint32_t ids_offset = 0;
  };

  void Clear();

  size_t max_entries_;
  size_t num_entries_ = 0;
  std::vector<Slot> slots_;  // power-of-two size, linear probing
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace peregrine::tokenizer
