// The BPE merge table and the merge loop, on token ids.
//
// Semantics (HF tokenizers' Word::merge_all without dropout): repeatedly merge the adjacent
// pair with the lowest rank, the leftmost one among equals, until no adjacent pair has a
// rank. Two strategies give that result: a quadratic scan for short words and a heap for
// long ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace peregrine::tokenizer {

class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };

  explicit MergeTable(size_t expected_size = 0);

  // A later insert of the same pair replaces the earlier one (the reference keeps the last).
  void Insert(int32_t left, int32_t right, uint32_t rank, int32_t new_id);

  // The merge for (left, right), or nullptr.
  const Merge* Find(int32_t left, int32_t right) const {
    const uint64_t key = Key(left, right);
    for (size_t i = Slot(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.key == key) return &e.merge;
      if (e.key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Entry {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t Slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  void Grow();

  std::vector<Entry> entries_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Scratch for MergeWord, reused across calls by one thread.
struct MergeScratch {
  struct Pair {
    uint32_t rank;
    int32_t new_id;
  };
  std::vector<Pair> pairs;
  std::vector<int32_t> prev, next;
  std::vector<uint64_t> heap;
};

// Merges `symbols` in place (see the file comment).
void MergeWord(const MergeTable& merges, std::vector<int32_t>& symbols, MergeScratch& scratch);

// The two strategies, exposed so tests can check that they agree.
void MergeWordByScan(const MergeTable& merges, std::vector<int32_t>& symbols,
                     MergeScratch& scratch);
void MergeWordByHeap(const MergeTable& merges, std::vector<int32_t>& symbols,
                     MergeScratch& scratch);

}  // namespace peregrine::tokenizer
