#include "base/log.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace peregrine {
namespace {

size_t CountLines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(LogTest, LinesCarryATimestampAndALevel) {
  testing::internal::CaptureStderr();
  LogWarning("disk {} is {}% full", "sda", 93);
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} warning disk sda is 93% full\n$)")))
      << out;
}

TEST(LogTest, TheLevelFiltersAndMultiLineTextBecomesOneLinePerLine) {
  SetLogLevel(LogLevel::kWarning);
  testing::internal::CaptureStderr();
  LogInfo("hidden");
  LogLines(LogLevel::kError, "first\nsecond\n\nthird");
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  EXPECT_EQ(CountLines(out), 3u) << out;
  SetLogLevel(LogLevel::kInfo);
  testing::internal::CaptureStderr();
  LogInfo("shown");
  out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("info    shown"), std::string::npos) << out;
}

TEST(LogTest, LevelNamesParseInAnyCase) {
  EXPECT_EQ(*ParseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("Error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
}

}  // namespace
}  // namespace peregrine
