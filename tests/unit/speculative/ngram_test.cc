// The n-gram drafter against a brute-force reference: for every suffix length from the
// longest down, the latest earlier occurrence, and its continuation cut to the request.
#include "speculative/ngram.h"

#include <gtest/gtest.h>

#include <random>

namespace peregrine::speculative {
namespace {

std::vector<int32_t> Reference(const std::vector<int32_t>& h, const NgramOptions& o, int32_t k) {
  const auto len = static_cast<int64_t>(h.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(o.max_match, len - 1); n >= std::max(o.min_match, 1); --n) {
    // Occurrences h[s, s + n) with s + n < len (a continuation exists), latest first.
    for (int64_t s = len - 1 - n; s >= 0; --s) {
      bool same = true;
      for (int64_t i = 0; i < n && same; ++i) same = h[static_cast<size_t>(s + i)] == h[static_cast<size_t>(len - n + i)];
      if (!same) continue;
      const int64_t from = s + n;
      const int64_t count = std::min<int64_t>(k, len - from);
      return {h.begin() + from, h.begin() + from + count};
    }
  }
  return {};
}

TEST(NgramDraftTest, ProposesTheContinuationOfTheLatestLongestMatch) {
  //                      0  1  2  3  4  5  6  7  8  9 10
  const std::vector<int32_t> h = {5, 6, 7, 8, 1, 6, 7, 9, 2, 6, 7};
  // "6 7" occurs at 1 and 5; the latest (5) continues with 9 2 6 7.
  EXPECT_EQ(NgramDraft(h, {1, 4}, 3), (std::vector<int32_t>{9, 2, 6}));
  // A longer match wins over a later shorter one: "x 6 7" with x = 2 only at the end, so the
  // longest earlier match is still "6 7".
  const std::vector<int32_t> g = {1, 6, 7, 3, 4, 2, 6, 7, 8, 9, 1, 6, 7};
  EXPECT_EQ(NgramDraft(g, {1, 4}, 2), (std::vector<int32_t>{3, 4}));  // "1 6 7" at 0
  EXPECT_EQ(NgramDraft(g, {1, 2}, 2), (std::vector<int32_t>{8, 9}));  // capped at 2: the latest "6 7"
}

TEST(NgramDraftTest, NothingWithoutAMatchOfTheMinimumLength) {
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{1, 2, 3, 4}, {1, 4}, 3).empty());
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{1, 2, 9, 2}, {2, 4}, 3).empty());
  EXPECT_EQ(NgramDraft(std::vector<int32_t>{1, 2, 9, 2}, {1, 4}, 3), (std::vector<int32_t>{9, 2}));
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{}, {1, 4}, 3).empty());
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{7}, {1, 4}, 3).empty());
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{7, 7, 7}, {1, 4}, 0).empty());
}

TEST(NgramDraftTest, RepeatsAndOverlappingOccurrences) {
  // "7 7 7": the suffix "7 7" occurs at 0 (continuation 7); a run keeps proposing itself.
  EXPECT_EQ(NgramDraft(std::vector<int32_t>{7, 7, 7}, {1, 4}, 5), (std::vector<int32_t>{7}));
  EXPECT_EQ(NgramDraft(std::vector<int32_t>{1, 2, 1, 2, 1, 2}, {1, 3}, 4), (std::vector<int32_t>{1, 2}));
}

TEST(NgramDraftTest, SearchesOnlyTheRecentTokens) {
  std::vector<int32_t> h = {4, 5, 6};
  for (int i = 0; i < 100; ++i) h.push_back(9);
  h.push_back(4);
  h.push_back(5);
  NgramOptions o{2, 4};
  EXPECT_EQ(NgramDraft(h, o, 1), (std::vector<int32_t>{6}));  // "4 5" at 0
  o.max_search_tokens = 50;
  EXPECT_TRUE(NgramDraft(h, o, 1).empty());
}

TEST(NgramDraftTest, MatchesTheReferenceOnRandomHistories) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int len = static_cast<int>(rng() % 40);
    const int vocab = 2 + static_cast<int>(rng() % 5);
    std::vector<int32_t> h(static_cast<size_t>(len));
    for (int32_t& t : h) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    NgramOptions o;
    o.min_match = 1 + static_cast<int32_t>(rng() % 3);
    o.max_match = o.min_match + static_cast<int32_t>(rng() % 5);
    const auto k = static_cast<int32_t>(rng() % 6);
    ASSERT_EQ(NgramDraft(h, o, k), Reference(h, o, k)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace peregrine::speculative
