#include "chat/reasoning_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/reasoning_literal_mask.h"
#include "parser_split_harness.h"

namespace peregrine::chat {
namespace {

using namespace std::string_literals;

constexpr std::string_view kV4Call =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n"
    "<｜DSML｜parameter name=\"q\" string=\"true\">peregrine</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

ParsedOutput Message(std::string reasoning, std::string content, std::vector<ToolCall> calls = {}) {
  return {std::move(reasoning), std::move(content), std::move(calls)};
}

// Whether the first '<' at or after `from` in `text` is masked.
bool IsAngleMasked(std::string_view text, size_t from = 0) {
  LiteralMask mask;
  for (size_t i = 0; i < text.size(); ++i) {
    mask.Advance(text[i]);
    if (i >= from && text[i] == '<') return mask.is_masked();
  }
  ADD_FAILURE() << "no '<' in " << text;
  return false;
}

TEST(LiteralMaskTest, PlainTextIsNotMasked) {
  EXPECT_FALSE(IsAngleMasked("hello <tag>"));
  EXPECT_FALSE(IsAngleMasked("line one\n<tag>"));
}

TEST(LiteralMaskTest, InlineCodeSpans) {
  EXPECT_TRUE(IsAngleMasked("use `<tag>` here"));
  EXPECT_TRUE(IsAngleMasked("use ``a ` <tag>`` here"));  // a shorter run does not close
  EXPECT_FALSE(IsAngleMasked("use `x` then <tag>"));     // closed before
  EXPECT_FALSE(IsAngleMasked("stray ` tick\n<tag>"));    // spans never cross a line
  EXPECT_TRUE(IsAngleMasked("`<tag>` at line start"));
}

TEST(LiteralMaskTest, FencedBlocks) {
  EXPECT_TRUE(IsAngleMasked("```\n<tag>\n```\n"));
  EXPECT_TRUE(IsAngleMasked("```xml\n<tag>\n```\n"));
  EXPECT_FALSE(IsAngleMasked("```\nx\n```\n<tag>"));             // closed
  EXPECT_TRUE(IsAngleMasked("~~~~\n```\n<tag>"));                // other char does not close
  EXPECT_TRUE(IsAngleMasked("````\n```\n<tag>"));                // shorter run does not close
  EXPECT_TRUE(IsAngleMasked("```\n``` not a closer\n<tag>"));    // text after the run
  EXPECT_FALSE(IsAngleMasked("   ```\nx\n   ```\n<tag>"));       // up to 3 spaces of indent
  EXPECT_FALSE(IsAngleMasked("    ```\n<tag>"));                 // 4 spaces: not a fence
  EXPECT_TRUE(IsAngleMasked("```\nno closer at all\n\n<tag>"));  // unclosed: rest is masked
  EXPECT_TRUE(IsAngleMasked("``` <tag>"));                       // the opener line itself
}

TEST(ReasoningTest, ChatModeIsAllContent) {
  auto config = ChatConfig(ModelDialect::kDeepSeekV4, false);
  EXPECT_EQ(ParseAllSplits(config, "Hello, world!"), Message("", "Hello, world!"));
  EXPECT_EQ(ParseAllSplits(config, "a</think>b"), Message("", "a</think>b"));
  EXPECT_EQ(ParseAllSplits(config, ""), Message("", ""));
}

TEST(ReasoningTest, ReasoningOnly) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, false);
  EXPECT_EQ(ParseAllSplits(config, "Let me think about 2+2 </thin"),
            Message("Let me think about 2+2 </thin", ""));
}

TEST(ReasoningTest, ReasoningThenContent) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, false);
  EXPECT_EQ(ParseAllSplits(config, "2+2 is 4.</think>The answer is 4."),
            Message("2+2 is 4.", "The answer is 4."));
  // Only the first </think> ends reasoning; a later one is content.
  EXPECT_EQ(ParseAllSplits(config, "r</think>c</think>d"), Message("r", "c</think>d"));
  EXPECT_EQ(ParseAllSplits(config, "</think>"), Message("", ""));
}

TEST(ReasoningTest, LeadingThinkTagIsDropped) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, false);
  EXPECT_EQ(ParseAllSplits(config, "<think>r</think>c"), Message("r", "c"));
  EXPECT_EQ(ParseAllSplits(config, "<thinking>r"), Message("<thinking>r", ""));
  EXPECT_EQ(ParseAllSplits(config, "<thin"), Message("<thin", ""));
  EXPECT_EQ(ParseAllSplits(config, "x<think>"), Message("x<think>", ""));
}

TEST(ReasoningTest, ThinkEndInsideCodeStillEndsReasoning) {
  // </think> is one special token, never quoted text.
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, true);
  EXPECT_EQ(ParseAllSplits(config, "```\n</think>\n```"), Message("```\n", "\n```"));
}

TEST(ReasoningTest, DsmlBlockWithoutThinkEndsReasoning) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, true);
  std::string text = "I should search."s + std::string(kV4Call);
  EXPECT_EQ(ParseAllSplits(config, text),
            Message("I should search.", "", {{"call_0", "search", R"({"q": "peregrine"})"}}));
}

TEST(ReasoningTest, DsmlEndMovesOnlyTwoSeparatorNewlines) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, true);
  std::string text = "r\n\n"s + std::string(kV4Call);  // three newlines, then two of kV4Call
  EXPECT_EQ(ParseAllSplits(config, text),
            Message("r\n\n", "", {{"call_0", "search", R"({"q": "peregrine"})"}}));
}

TEST(ReasoningTest, V32DsmlBlockEndsReasoning) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV32, true);
  std::string text =
      "hmm\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  EXPECT_EQ(ParseAllSplits(config, text), Message("hmm", "", {{"call_0", "f", R"({"n": 3})"}}));
  // The V4 opener means nothing to a V3.2 model.
  std::string v4 = "hmm"s + std::string(kV4Call);
  EXPECT_EQ(ParseAllSplits(config, v4), Message(v4, ""));
}

TEST(ReasoningTest, DsmlDoesNotEndReasoningWithoutTools) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, false);
  std::string text = "r"s + std::string(kV4Call);
  EXPECT_EQ(ParseAllSplits(config, text), Message(text, ""));
}

TEST(ReasoningTest, QuotedDsmlInReasoningLaterClosed) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, true);
  // Inline code.
  std::string inline_code =
      "Call with `<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">` later.</think>Done.";
  // An inline span does not cross lines, so the second line is not quoted, but it has no opener.
  EXPECT_EQ(
      ParseAllSplits(config, inline_code),
      Message("Call with `<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">` later.", "Done."));
  // A fenced example with a complete call in it.
  std::string fenced = "Format:\n```\n"s + std::string(kV4Call) + "\n```\nSo I answer.</think>Hi";
  EXPECT_EQ(ParseAllSplits(config, fenced),
            Message("Format:\n```\n"s + std::string(kV4Call) + "\n```\nSo I answer.", "Hi"));
  // A tilde fence.
  std::string tilde = "~~~\n<｜DSML｜tool_calls>\n<｜DSML｜invoke\n~~~\nok</think>c";
  EXPECT_EQ(ParseAllSplits(config, tilde),
            Message("~~~\n<｜DSML｜tool_calls>\n<｜DSML｜invoke\n~~~\nok", "c"));
  // Mentioned in prose, not followed by an invoke: not a tool block.
  std::string prose = "The <｜DSML｜tool_calls> block wraps calls.</think>c";
  EXPECT_EQ(ParseAllSplits(config, prose),
            Message("The <｜DSML｜tool_calls> block wraps calls.", "c"));
}

TEST(ReasoningTest, CallAfterClosedFenceEndsReasoning) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, true);
  std::string text = "```\ncode\n```\nNow call."s + std::string(kV4Call);
  EXPECT_EQ(ParseAllSplits(config, text), Message("```\ncode\n```\nNow call.", "",
                                                  {{"call_0", "search", R"({"q": "peregrine"})"}}));
}

TEST(ReasoningTest, ReasoningThenContentThenCall) {
  auto config = ThinkingConfig(ModelDialect::kDeepSeekV4, true);
  std::string text = "plan</think>Searching now."s + std::string(kV4Call);
  EXPECT_EQ(ParseAllSplits(config, text),
            Message("plan", "Searching now.", {{"call_0", "search", R"({"q": "peregrine"})"}}));
}

TEST(ReasoningTest, HoldsBackOnlyPossibleMarkers) {
  ReasoningParser parser({true, "<｜DSML｜tool_calls>", "<｜DSML｜invoke"});
  EXPECT_EQ(parser.Feed("<thi"), ReasoningDelta({"", ""}));
  EXPECT_EQ(parser.Feed("nk>abc"), ReasoningDelta({"abc", ""}));
  EXPECT_EQ(parser.Feed("d</"), ReasoningDelta({"d", ""}));
  EXPECT_EQ(parser.Feed("p>e\n"), ReasoningDelta({"</p>e", ""}));
  EXPECT_EQ(parser.Feed("\n"), ReasoningDelta({"", ""}));
  EXPECT_EQ(parser.Feed("<｜DSML｜tool_calls>"), ReasoningDelta({"", ""}));
  EXPECT_EQ(parser.Feed(" is the tag"),
            ReasoningDelta({"\n\n<｜DSML｜tool_calls> is the tag", ""}));
  EXPECT_EQ(parser.Feed("</think>x"), ReasoningDelta({"", "x"}));
  EXPECT_EQ(parser.Feed("y"), ReasoningDelta({"", "y"}));
  EXPECT_EQ(parser.Finish(), ReasoningDelta({"", ""}));
}

TEST(ReasoningTest, FinishReleasesHeldBytesAsReasoning) {
  ReasoningParser parser({true, "<｜DSML｜tool_calls>", "<｜DSML｜invoke"});
  EXPECT_EQ(parser.Feed("abc\n\n<｜DSML｜tool_calls>\n"), ReasoningDelta({"abc", ""}));
  EXPECT_EQ(parser.Finish(), ReasoningDelta({"\n\n<｜DSML｜tool_calls>\n", ""}));
}

TEST(ReasoningTest, SplitReasoningMatchesParser) {
  ReasoningParserOptions options{true, "", ""};
  EXPECT_EQ(SplitReasoning("a</think>b", options), ReasoningDelta({"a", "b"}));
  EXPECT_EQ(SplitReasoning("a</thi", options), ReasoningDelta({"a</thi", ""}));
}

}  // namespace
}  // namespace peregrine::chat
