#include "tokenizer/bpe_merges.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/word_cache.h"

namespace peregrine::tokenizer {
namespace {

TEST(MergeTableTest, FindsInsertsAndKeepsTheLastDuplicate) {
  MergeTable t;
  for (int i = 0; i < 1000; ++i) t.Insert(i, i + 1, static_cast<uint32_t>(i), 5000 + i);
  EXPECT_EQ(t.size(), 1000u);
  ASSERT_NE(t.Find(7, 8), nullptr);
  EXPECT_EQ(t.Find(7, 8)->rank, 7u);
  EXPECT_EQ(t.Find(7, 8)->new_id, 5007);
  EXPECT_EQ(t.Find(8, 7), nullptr);
  t.Insert(7, 8, 2000, 42);
  EXPECT_EQ(t.size(), 1000u);
  EXPECT_EQ(t.Find(7, 8)->rank, 2000u);
  EXPECT_EQ(t.Find(7, 8)->new_id, 42);
}

TEST(MergeWordTest, LowestRankFirstAndLeftmostAmongEquals) {
  // Symbols a=0 b=1 c=2; merges: (a,b)->ab=3 rank 1, (b,c)->bc=4 rank 0, (a,bc)->abc=5 rank 2,
  // (a,a)->aa=6 rank 3.
  MergeTable t;
  t.Insert(0, 1, 1, 3);
  t.Insert(1, 2, 0, 4);
  t.Insert(0, 4, 2, 5);
  t.Insert(0, 0, 3, 6);
  MergeScratch scratch;
  std::vector<int32_t> w = {0, 1, 2};  // bc first (rank 0), then a+bc
  MergeWord(t, w, scratch);
  EXPECT_EQ(w, (std::vector<int32_t>{5}));
  w = {0, 0, 0};  // leftmost pair merges first: aa a
  MergeWord(t, w, scratch);
  EXPECT_EQ(w, (std::vector<int32_t>{6, 0}));
  w = {0, 1, 0, 1};
  MergeWord(t, w, scratch);
  EXPECT_EQ(w, (std::vector<int32_t>{3, 3}));
  w = {};
  MergeWord(t, w, scratch);
  EXPECT_TRUE(w.empty());
}

// The quadratic scan and the heap must agree on every word.
TEST(MergeWordTest, ScanAndHeapAgreeOnRandomTables) {
  std::mt19937 rng(42);
  for (int round = 0; round < 20; ++round) {
    const int alphabet = 3 + static_cast<int>(rng() % 6);
    MergeTable t;
    int next_id = alphabet;
    std::vector<int32_t> known;
    for (int i = 0; i < alphabet; ++i) known.push_back(i);
    for (uint32_t rank = 0; rank < 60; ++rank) {
      const int32_t a = known[rng() % known.size()];
      const int32_t b = known[rng() % known.size()];
      t.Insert(a, b, rank, next_id);
      known.push_back(next_id++);
    }
    MergeScratch s1, s2;
    for (int k = 0; k < 300; ++k) {
      std::vector<int32_t> w(1 + rng() % 200);
      for (auto& x : w) x = static_cast<int32_t>(rng() % static_cast<unsigned>(alphabet));
      std::vector<int32_t> a = w, b = w;
      MergeWordByScan(t, a, s1);
      MergeWordByHeap(t, b, s2);
      ASSERT_EQ(a, b) << "round " << round << " word " << k;
    }
  }
}

TEST(WordCacheTest, StoresAndForgetsWhenFull) {
  WordCache cache(4);
  const std::vector<int32_t> ids = {1, 2, 3};
  size_t n = 0;
  EXPECT_EQ(cache.Find("abc", WordCache::Hash("abc"), &n), nullptr);
  cache.Insert("abc", WordCache::Hash("abc"), ids);
  const int32_t* got = cache.Find("abc", WordCache::Hash("abc"), &n);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(std::vector<int32_t>(got, got + n), ids);
  for (const char* w : {"b", "c", "d", "e"}) cache.Insert(w, WordCache::Hash(w), ids);
  EXPECT_EQ(cache.Find("abc", WordCache::Hash("abc"), &n), nullptr);  // cleared at capacity
  EXPECT_NE(cache.Find("e", WordCache::Hash("e"), &n), nullptr);
  const std::string long_word(WordCache::kMaxWordBytes, 'x');
  cache.Insert(long_word, WordCache::Hash(long_word), ids);
  EXPECT_EQ(cache.Find(long_word, WordCache::Hash(long_word), &n), nullptr);
}

}  // namespace
}  // namespace peregrine::tokenizer
