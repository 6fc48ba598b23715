#include "chat/tool_call_parser_dsml.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parser_split_harness.h"

namespace peregrine::chat {
namespace {

using namespace std::string_literals;

ParsedOutput Message(std::string content, std::vector<ToolCall> calls = {}) {
  return {"", std::move(content), std::move(calls)};
}

std::string Param(std::string_view name, std::string_view is_string, std::string_view value) {
  return "<｜DSML｜parameter name=\"" + std::string(name) + "\" string=\"" +
         std::string(is_string) + "\">" + std::string(value) + "</｜DSML｜parameter>";
}

std::string Invoke(std::string_view name, const std::vector<std::string>& params) {
  std::string s = "<｜DSML｜invoke name=\""s + std::string(name) + "\">\n";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? "\n" : "") + params[i];
  return s + "\n</｜DSML｜invoke>";
}

std::string Block(const std::vector<std::string>& invokes,
                  std::string_view wrapper = "tool_calls") {
  std::string s = "\n\n<｜DSML｜"s + std::string(wrapper) + ">\n";
  for (size_t i = 0; i < invokes.size(); ++i) s += (i ? "\n" : "") + invokes[i];
  return s + "\n</｜DSML｜" + std::string(wrapper) + ">";
}

const OutputParserConfig kV4 = ChatConfig(ModelDialect::kDeepSeekV4, true);
const OutputParserConfig kV32 = ChatConfig(ModelDialect::kDeepSeekV32, true);

TEST(DsmlToolCallTest, PlainContentPassesThrough) {
  EXPECT_EQ(ParseAllSplits(kV4, "Just text, with <b>tags</b> and ｜pipes｜.\n\n"),
            Message("Just text, with <b>tags</b> and ｜pipes｜.\n\n"));
}

TEST(DsmlToolCallTest, SingleStringParameter) {
  std::string text =
      "Let me check."s + Block({Invoke("get_weather", {Param("city", "true", "Paris")})});
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("Let me check.", {{"call_0", "get_weather", R"({"city": "Paris"})"}}));
}

TEST(DsmlToolCallTest, MultipleParametersStringTrueAndFalse) {
  std::string text =
      Block({Invoke("f", {Param("s", "true", "  spaced  "), Param("n", "false", "42"),
                          Param("x", "false", "-1.50e3"), Param("b", "false", "true"),
                          Param("z", "false", "null"), Param("quoted", "true", "42"),
                          Param("a", "false", "[1, \"two\", [3]]"),
                          Param("o", "false", " {\"k\": {\"deep\": [true, null]}} ")})});
  EXPECT_EQ(
      ParseAllSplits(kV4, text),
      Message("",
              {{"call_0", "f",
                R"({"s": "  spaced  ", "n": 42, "x": -1.50e3, "b": true, "z": null, )"
                R"("quoted": "42", "a": [1, "two", [3]], "o": {"k": {"deep": [true, null]}}})"}}));
}

TEST(DsmlToolCallTest, StringValuesAreEscaped) {
  std::string text =
      Block({Invoke("write", {Param("code", "true", "line \"1\"\n\tback\\slash\n")})});
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("", {{"call_0", "write", R"({"code": "line \"1\"\n\tback\\slash\n"})"}}));
}

TEST(DsmlToolCallTest, UnicodeValues) {
  std::string text =
      Block({Invoke("翻译", {Param("文本", "true", "北京的天气怎么样？🌤️"),
                             Param("tags", "false", "[\"🚀\", \"日本語\"]")})});
  EXPECT_EQ(
      ParseAllSplits(kV4, text),
      Message(
          "",
          {{"call_0", "翻译",
            R"({"文本": "北京的天气怎么样？🌤️", "tags": ["🚀", "日本語"]})"}}));
}

TEST(DsmlToolCallTest, MultipleInvokes) {
  std::string text =
      "Two lookups." +
      Block({Invoke("get_weather", {Param("city", "true", "Paris")}),
             Invoke("get_weather", {Param("city", "true", "東京")}), Invoke("get_time", {})});
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("Two lookups.", {{"call_0", "get_weather", R"({"city": "Paris"})"},
                                     {"call_1", "get_weather", R"({"city": "東京"})"},
                                     {"call_2", "get_time", "{}"}}));
}

TEST(DsmlToolCallTest, JsonObjectBody) {
  std::string text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n{\"a\": [1, {\"b\": \"</x>\"}]}\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("", {{"call_0", "f", R"({"a": [1, {"b": "</x>"}]})"}}));
}

TEST(DsmlToolCallTest, LenientWhitespaceInTags) {
  std::string text =
      "<｜DSML｜tool_calls><｜DSML｜invoke  name=\"f\" >  <｜DSML｜parameter "
      "name=\"p\"\tstring=\"true\" >v"
      "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>";
  EXPECT_EQ(ParseAllSplits(kV4, text), Message("", {{"call_0", "f", R"({"p": "v"})"}}));
}

TEST(DsmlToolCallTest, TextAfterBlockAndSecondBlock) {
  std::string block1 = Block({Invoke("a", {})});
  std::string block2 = Block({Invoke("b", {Param("k", "false", "1")})});
  std::string text = "x"s + block1 + "\nbetween" + block2 + " tail";
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("x\nbetween tail", {{"call_0", "a", "{}"}, {"call_1", "b", R"({"k": 1})"}}));
}

TEST(DsmlToolCallTest, V32FunctionCallsWrapper) {
  std::string text = "ok"s + Block({Invoke("f", {Param("p", "true", "v")})}, "function_calls");
  EXPECT_EQ(ParseAllSplits(kV32, text), Message("ok", {{"call_0", "f", R"({"p": "v"})"}}));
  // Each dialect only knows its own wrapper.
  EXPECT_EQ(ParseAllSplits(kV4, text), Message(text));
  std::string v4 = Block({Invoke("f", {})});
  EXPECT_EQ(ParseAllSplits(kV32, v4), Message(v4));
}

TEST(DsmlToolCallTest, NoToolsMeansNoParsing) {
  std::string text = "a"s + Block({Invoke("f", {})});
  EXPECT_EQ(ParseAllSplits(ChatConfig(ModelDialect::kDeepSeekV4, false), text), Message(text));
}

// Every malformed first item gives back the whole input as content.
TEST(DsmlToolCallTest, MalformedBlocksFallBackVerbatim) {
  const std::vector<std::string> bad_blocks = {
      Block({Invoke("f", {Param("n", "false", "{bad json")})}),
      Block({Invoke("f", {Param("n", "false", "")})}),
      Block({Invoke("f", {Param("n", "false", "1 2")})}),
      Block({Invoke("f", {Param("n", "maybe", "1")})}),
      Block({Invoke("f", {Param("n", "true", "1"), Param("n", "true", "2")})}),  // duplicate
      Block({Invoke("f", {Param("", "true", "1")})}),                            // empty name
      Block({Invoke("", {Param("p", "true", "1")})}),                            // empty tool name
      Block({Invoke("f", {"garbage", Param("p", "true", "1")})}),
      Block({Invoke("f", {Param("p", "true", "1"), "{\"a\": 1}"})}),  // params then JSON
      Block({Invoke("f", {"[1, 2]"})}),                               // JSON, not object
      Block({Invoke("f", {"{\"a\": }"})}),
      Block({"<｜DSML｜invoke name=\"f\" extra=\"1\">\n</｜DSML｜invoke>"}),
      Block({"<｜DSML｜parameter name=\"p\" string=\"true\">v</｜DSML｜parameter>"}),
      Block({"not an invoke"}),
      Block({}),  // empty block
      Block({Invoke("f", {Param("p", "true", "bad \xff utf8")})}),
      Block({Invoke("f", {Param("n", "false", "3\0junk"s)})}),  // NUL is not end of input
      Block({Invoke("f", {"{\"a\": 1}\0}"s})}),
  };
  for (const auto& block : bad_blocks) {
    std::string text = "Before."s + block + " After.";
    EXPECT_EQ(ParseAllSplits(kV4, text), Message(text)) << block;
  }
}

TEST(DsmlToolCallTest, MalformedSecondInvokeKeepsFirstCall) {
  std::string bad = Invoke("g", {Param("n", "false", "nope")});
  std::string text = "c"s + Block({Invoke("f", {}), bad}) + "!";
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("c\n"s + bad + "\n</｜DSML｜tool_calls>!", {{"call_0", "f", "{}"}}));
}

TEST(DsmlToolCallTest, FallbackResumesParsingAfterTheBlock) {
  std::string bad = Block({Invoke("f", {"junk"})});
  std::string good = Block({Invoke("g", {})});
  EXPECT_EQ(ParseAllSplits(kV4, bad + good), Message(bad, {{"call_0", "g", "{}"}}));
}

TEST(DsmlToolCallTest, UnterminatedAtEndOfStream) {
  const std::vector<std::string> cut_inputs = {
      "a\n\n<｜DSML｜tool_calls>",
      "a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f",
      "a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" + Param("p", "true", "v"),
      "a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"p\" "
      "string=\"true\">partial val",
      "a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n{\"a\": 1}",
      "a\n\n<｜DS",
  };
  for (const auto& text : cut_inputs) {
    EXPECT_EQ(ParseAllSplits(kV4, text), Message(text)) << text;
  }
}

TEST(DsmlToolCallTest, CompleteCallsStandWhenOnlyTheCloserIsMissing) {
  std::string head = "a\n\n<｜DSML｜tool_calls>\n"s + Invoke("f", {});
  EXPECT_EQ(ParseAllSplits(kV4, head), Message("a", {{"call_0", "f", "{}"}}));
  EXPECT_EQ(ParseAllSplits(kV4, head + "\n</｜DSML｜too"), Message("a", {{"call_0", "f", "{}"}}));
  EXPECT_EQ(ParseAllSplits(kV4, head + "\nmore"), Message("a\nmore", {{"call_0", "f", "{}"}}));
}

TEST(DsmlToolCallTest, ValueContainingOtherTagsEndsAtItsOwnCloser) {
  std::string text = Block(
      {Invoke("f", {Param("html", "true", "<p>x</p></｜DSML｜invoke></｜DSML｜tool_calls>")})});
  EXPECT_EQ(ParseAllSplits(kV4, text),
            Message("", {{"call_0", "f",
                          R"({"html": "<p>x</p></｜DSML｜invoke></｜DSML｜tool_calls>"})"}}));
}

TEST(DsmlItemParserTest, AnswerNeverChangesOnceDecided) {
  DsmlItemParser parser("</｜DSML｜tool_calls>");
  std::string text =
      "\n<｜DSML｜invoke name=\"f\">\n"s + Param("p", "true", "v") + "\n</｜DSML｜invoke>";
  for (size_t n = 0; n < text.size(); ++n) {
    EXPECT_EQ(parser.Parse(std::string_view(text).substr(0, n)).status, ItemStatus::kNeedMore) << n;
  }
  ItemResult done = parser.Parse(text);
  EXPECT_EQ(done.status, ItemStatus::kCall);
  EXPECT_EQ(done.consumed, text.size());
  EXPECT_EQ(done.arguments, R"({"p": "v"})");
}

}  // namespace
}  // namespace peregrine::chat
