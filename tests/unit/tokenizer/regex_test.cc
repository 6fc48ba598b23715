#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tokenizer/regex_translate.h"

namespace peregrine::tokenizer {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans Matches(std::string_view pattern, std::string_view text,
              Regex::Syntax syntax = Regex::Syntax::kOniguruma) {
  auto regex = Regex::Compile(pattern, syntax);
  EXPECT_TRUE(regex.ok()) << regex.status().ToString();
  if (!regex.ok()) return {};
  MatchScratch scratch;
  Spans out;
  EXPECT_TRUE(regex->FindAll(text, scratch, [&](size_t b, size_t e) { out.emplace_back(b, e); }).ok());
  return out;
}

std::string Translate(std::string_view pattern) {
  auto t = TranslateOnigurumaPattern(pattern);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : "";
}

TEST(RegexTranslateTest, RewritesDialectDifferences) {
  EXPECT_EQ(Translate("(?m)a.b"), "(?s)a.b");          // Ruby m is dotall
  EXPECT_EQ(Translate("\\h+"), "[0-9a-fA-F]+");         // Ruby \h is a hex digit
  EXPECT_EQ(Translate("\\v"), "\\x0B");
  EXPECT_EQ(Translate("\\u00e9"), "\\x{00e9}");
  EXPECT_EQ(Translate("a{,3}"), "a{0,3}");
  EXPECT_EQ(Translate("[a-z]+\\.x"), "[a-z]+\\.x");
  EXPECT_EQ(Translate("\\s"), "[\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
                              "\\x{2029}\\x{202F}\\x{205F}\\x{3000}]");
  // General categories gain the characters newer than PCRE2's tables.
  const std::string letters = Translate("\\p{L}");
  EXPECT_EQ(letters.rfind("[\\p{L}", 0), 0u) << letters;
  EXPECT_NE(letters.find("\\x{1C89}"), std::string::npos) << letters;  // Unicode 16 letter
  EXPECT_NE(Translate("[^\\p{Letter}]").find("\\x{1C89}"), std::string::npos);
  EXPECT_EQ(Translate("\\p{Han}"), "\\p{Han}");  // scripts pass through
}

TEST(RegexTranslateTest, RejectsWhatPcre2CannotExpress) {
  for (std::string_view p : {"[a[b]]", "[a-z&&[^aeiou]]", "(?~abc)", "[\\P{L}]", "[[:alpha:]]",
                             "[\\S]", "(?y)"}) {
    auto t = TranslateOnigurumaPattern(p);
    ASSERT_FALSE(t.ok()) << p;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << p << ": " << t.status().ToString();
  }
  auto bad = Regex::Compile("(", Regex::Syntax::kOniguruma);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(RegexTest, EnumeratesMatchesLikeOniguruma) {
  EXPECT_EQ(Matches("\\p{N}{1,3}", "a12345b6"), (Spans{{1, 4}, {4, 6}, {7, 8}}));
  // An empty match right where the previous match ended is skipped; the search then resumes
  // one character later, so (3, 3) is not reported.
  EXPECT_EQ(Matches("a*", "baac"), (Spans{{0, 0}, {1, 3}, {4, 4}}));
  // Stepping over an empty match moves by a whole character, not a byte.
  EXPECT_EQ(Matches("x*", "é"), (Spans{{0, 0}, {2, 2}}));
  EXPECT_EQ(Matches("\\s+(?!\\S)|\\s+", "a   b"), (Spans{{1, 3}, {3, 4}}));
  EXPECT_EQ(Matches("^x", "x\nx"), (Spans{{0, 1}, {2, 3}}));  // Ruby ^ is a line anchor
  EXPECT_EQ(Matches("a.b", "a\nb"), Spans{});
  EXPECT_EQ(Matches("(?m)a.b", "a\nb"), (Spans{{0, 3}}));
  EXPECT_EQ(Matches("a+b", "xa+bx", Regex::Syntax::kLiteral), (Spans{{1, 4}}));
  EXPECT_EQ(Matches("\\p{L}+", "\u1C89\u1C8A x"), (Spans{{0, 6}, {7, 8}}));
}

TEST(RegexTest, LongRunsDoNotExhaustTheStack) {
  const std::string spaces(200000, ' ');
  const std::string text = "a" + spaces + "b";
  EXPECT_EQ(Matches("\\s+(?!\\S)|\\s+", text), (Spans{{1, spaces.size()}, {spaces.size(), spaces.size() + 1}}));
  EXPECT_EQ(Matches("\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", text).size(), 2u);
}

}  // namespace
}  // namespace peregrine::tokenizer
