#include "base/progress.h"

#include <gtest/gtest.h>

namespace peregrine {
namespace {

TEST(ProgressTest, BarFillsWithTheShareDone) {
  EXPECT_EQ(FormatProgress("weights", 0, 4, 0, 0.0, 8), "weights [>       ] 0/4, 0.0 GB, 0.0 s");
  EXPECT_EQ(FormatProgress("weights", 2, 4, 1'500'000'000, 2.25, 8), "weights [====>   ] 2/4, 1.5 GB, 2.2 s");
  EXPECT_EQ(FormatProgress("weights", 4, 4, 3'000'000'000, 9.0, 8), "weights [========] 4/4, 3.0 GB, 9.0 s");
}

TEST(ProgressTest, OutOfRangeCountsAreClamped) {
  EXPECT_EQ(FormatProgress("w", 9, 4, 0, 0.0, 4), "w [====] 4/4, 0.0 GB, 0.0 s");
  EXPECT_EQ(FormatProgress("w", -1, 0, 0, 0.0, 4), "w [>   ] 0/1, 0.0 GB, 0.0 s");
}

TEST(ProgressTest, OffATerminalLogsEachQuarterOnce) {
  testing::internal::CaptureStderr();
  Progress p("weights", /*is_terminal=*/false);
  for (int i = 1; i <= 8; ++i) p.Update(i, 8, 0);
  const std::string out = testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 4u) << out;
  EXPECT_NE(out.find("weights [==============================] 8/8"), std::string::npos) << out;
}

}  // namespace
}  // namespace peregrine
