#include "tokenizer/bpe_merges.h"

#include <algorithm>
#include <bit>
#include <functional>

namespace peregrine::tokenizer {
namespace {

constexpr uint32_t kNoRank = ~uint32_t{0};

// Words longer than this use the heap; the scan's quadratic cost is lower below it.
constexpr size_t kScanMaxSymbols = 48;

MergeScratch::Pair Lookup(const MergeTable& merges, int32_t left, int32_t right) {
  const MergeTable::Merge* m = merges.Find(left, right);
  return m == nullptr ? MergeScratch::Pair{kNoRank, -1} : MergeScratch::Pair{m->rank, m->new_id};
}

}  // namespace

MergeTable::MergeTable(size_t expected_size) {
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, expected_size * 2));
  entries_.assign(capacity, Entry{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void MergeTable::Grow() {
  std::vector<Entry> old;
  old.swap(entries_);
  const size_t capacity = old.size() * 2;
  entries_.assign(capacity, Entry{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  for (const Entry& e : old) {
    if (e.key == kEmpty) continue;
    size_t i = Slot(e.key);
    while (entries_[i].key != kEmpty) i = (i + 1) & mask_;
    entries_[i] = e;
  }
}

void MergeTable::Insert(int32_t left, int32_t right, uint32_t rank, int32_t new_id) {
  if ((size_ + 1) * 2 > entries_.size()) Grow();
  const uint64_t key = Key(left, right);
  size_t i = Slot(key);
  while (entries_[i].key != kEmpty && entries_[i].key != key) i = (i + 1) & mask_;
  if (entries_[i].key == kEmpty) ++size_;
  entries_[i] = Entry{key, Merge{rank, new_id}};
}

void MergeWordByScan(const MergeTable& merges, std::vector<int32_t>& symbols,
                     MergeScratch& scratch) {
  size_t n = symbols.size();
  if (n < 2) return;
  auto& pairs = scratch.pairs;
  pairs.resize(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) pairs[i] = Lookup(merges, symbols[i], symbols[i + 1]);
  while (n > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pairs[i].rank < best) {
        best = pairs[i].rank;
        at = i;
      }
    }
    if (best == kNoRank) break;
    symbols[at] = pairs[at].new_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(at));
    --n;
    if (at > 0) pairs[at - 1] = Lookup(merges, symbols[at - 1], symbols[at]);
    if (at + 1 < n) pairs[at] = Lookup(merges, symbols[at], symbols[at + 1]);
  }
}

void MergeWordByHeap(const MergeTable& merges, std::vector<int32_t>& symbols,
                     MergeScratch& scratch) {
  const size_t n = symbols.size();
  if (n < 2) return;
  constexpr int32_t kDead = -1;
  auto& prev = scratch.prev;
  auto& next = scratch.next;
  auto& heap = scratch.heap;  // (rank << 32 | left position), smallest first
  prev.resize(n);
  next.resize(n);
  heap.clear();
  const auto push = [&](uint32_t rank, size_t pos) {
    heap.push_back((uint64_t{rank} << 32) | pos);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = static_cast<int32_t>(i + 1);
    if (i + 1 < n) {
      if (const MergeTable::Merge* m = merges.Find(symbols[i], symbols[i + 1])) push(m->rank, i);
    }
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto pos = static_cast<size_t>(top & 0xFFFFFFFFu);
    if (symbols[pos] == kDead) continue;
    const auto right = static_cast<size_t>(next[pos]);
    if (right >= n) continue;
    // Stale entry: the pair at `pos` changed since it was queued.
    const MergeTable::Merge* m = merges.Find(symbols[pos], symbols[right]);
    if (m == nullptr || m->rank != rank) continue;
    symbols[pos] = m->new_id;
    symbols[right] = kDead;
    next[pos] = next[right];
    if (static_cast<size_t>(next[pos]) < n) prev[static_cast<size_t>(next[pos])] = static_cast<int32_t>(pos);
    if (prev[pos] >= 0) {
      const auto left = static_cast<size_t>(prev[pos]);
      if (const MergeTable::Merge* lm = merges.Find(symbols[left], symbols[pos])) push(lm->rank, left);
    }
    if (static_cast<size_t>(next[pos]) < n) {
      const auto after = static_cast<size_t>(next[pos]);
      if (const MergeTable::Merge* rm = merges.Find(symbols[pos], symbols[after])) push(rm->rank, pos);
    }
  }
  std::erase(symbols, kDead);
}

void MergeWord(const MergeTable& merges, std::vector<int32_t>& symbols, MergeScratch& scratch) {
  if (symbols.size() <= kScanMaxSymbols) {
    MergeWordByScan(merges, symbols, scratch);
  } else {
    MergeWordByHeap(merges, symbols, scratch);
  }
}

}  // namespace peregrine::tokenizer
