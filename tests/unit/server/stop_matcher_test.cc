#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace peregrine::server {
namespace {

// Feeds `text` cut at every pair of positions; the released text must not depend on the cuts.
std::string Run(const std::vector<std::string>& stops, bool include, const std::string& text,
                size_t cut1, size_t cut2, bool* stopped) {
  StopMatcher m(stops, include);
  std::string out;
  *stopped = false;
  const size_t cuts[] = {0, cut1, cut2, text.size()};
  for (int i = 0; i < 3 && !*stopped; ++i) {
    *stopped = m.Feed(std::string_view(text).substr(cuts[i], cuts[i + 1] - cuts[i]), out);
  }
  if (!*stopped) m.Finish(out);
  return out;
}

void ExpectAllSplits(const std::vector<std::string>& stops, bool include, const std::string& text,
                     const std::string& expected, bool expected_stop) {
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      bool stopped = false;
      EXPECT_EQ(Run(stops, include, text, a, b, &stopped), expected) << a << "," << b;
      EXPECT_EQ(stopped, expected_stop) << a << "," << b;
    }
  }
}

TEST(StopMatcher, FindsStopsAcrossEverySplit) {
  ExpectAllSplits({"STOP"}, false, "abc STOP def", "abc ", true);
  ExpectAllSplits({"STOP"}, true, "abc STOP def", "abc STOP", true);
  ExpectAllSplits({"xyz"}, false, "abc STOP def", "abc STOP def", false);
  ExpectAllSplits({"aab"}, false, "aaaab", "aa", true);  // needs the KMP fallback
  ExpectAllSplits({"bc", "abab"}, false, "ababc", "", true);    // earliest end wins
  ExpectAllSplits({"c", "abc"}, false, "xabcx", "x", true);      // longest on a tie
  ExpectAllSplits({"🙂"}, false, "a 🙂 b", "a ", true);
  ExpectAllSplits({}, false, "nothing", "nothing", false);
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefixes) {
  StopMatcher m({"STOP"}, false);
  std::string out;
  EXPECT_FALSE(m.Feed("abc ST", out));
  EXPECT_EQ(out, "abc ");
  EXPECT_FALSE(m.Feed("x", out));
  EXPECT_EQ(out, "abc STx");
}

TEST(StopMatcher, ManyLongStopsStayLinear) {
  std::vector<std::string> stops;
  for (int i = 0; i < 16; ++i) stops.push_back(std::string(1000, 'a') + static_cast<char>('b' + i));
  StopMatcher m(stops, false);
  std::string out;
  for (int i = 0; i < 20000; ++i) ASSERT_FALSE(m.Feed("a", out));
  EXPECT_TRUE(m.Feed("b", out));
  EXPECT_EQ(out.size(), 20000u - 1000u);
}

}  // namespace
}  // namespace peregrine::server
