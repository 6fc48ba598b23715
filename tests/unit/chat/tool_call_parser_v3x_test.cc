#include "chat/tool_call_parser_v3x.h"

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

constexpr std::string_view kBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kEnd = "<｜tool▁calls▁end｜>";

std::string V31Call(std::string_view name, std::string_view json) {
  return "<｜tool▁call▁begin｜>" + std::string(name) + "<｜tool▁sep｜>" + std::string(json) +
         "<｜tool▁call▁end｜>";
}

std::string V3Call(std::string_view name, std::string_view json,
                   std::string_view type = "function") {
  return "<｜tool▁call▁begin｜>" + std::string(type) + "<｜tool▁sep｜>" + std::string(name) +
         "\n```json\n" + std::string(json) + "\n```<｜tool▁call▁end｜>";
}

std::string Block(const std::vector<std::string>& calls, std::string_view sep = "") {
  std::string s(kBegin);
  for (size_t i = 0; i < calls.size(); ++i) s += (i ? std::string(sep) : "") + calls[i];
  return s + std::string(kEnd);
}

const OutputParserConfig kV31 = ChatConfig(ModelDialect::kDeepSeekV31, true);
const OutputParserConfig kV3 = ChatConfig(ModelDialect::kDeepSeekV3, true);

TEST(V31ToolCallTest, SingleAndMultipleCalls) {
  std::string one = "Checking."s + Block({V31Call("get_weather", R"({"location": "Tokyo"})")});
  EXPECT_EQ(ParseAllSplits(kV31, one),
            Message("Checking.", {{"call_0", "get_weather", R"({"location": "Tokyo"})"}}));
  std::string two = Block({V31Call("a", "{}"), V31Call(" b ", " {\"x\": [1, 2.5, \"東\"]}\n")});
  EXPECT_EQ(ParseAllSplits(kV31, two),
            Message("", {{"call_0", "a", "{}"}, {"call_1", "b", R"({"x": [1, 2.5, "東"]})"}}));
}

TEST(V31ToolCallTest, TextAfterBlock) {
  std::string text = Block({V31Call("f", R"({"e": "🚀"})")}) + " done";
  EXPECT_EQ(ParseAllSplits(kV31, text), Message(" done", {{"call_0", "f", R"({"e": "🚀"})"}}));
}

TEST(V31ToolCallTest, MalformedFallsBack) {
  const std::vector<std::string> bad_blocks = {
      Block({V31Call("f", "{bad}")}),
      Block({V31Call("f", "[1]")}),
      Block({V31Call("f", "{}\0"s)}),
      Block({V31Call("", "{}")}),
      Block({V31Call("f<x>", "{}")}),
      Block({"<｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜>"}),  // no separator in the call
      Block({"junk"}),
      Block({}),
  };
  for (const auto& block : bad_blocks) {
    std::string text = "pre "s + block + " post";
    EXPECT_EQ(ParseAllSplits(kV31, text), Message(text)) << block;
  }
}

TEST(V31ToolCallTest, JunkAfterAGoodCallFallsBackFromThere) {
  std::string text =
      "pre "s + std::string(kBegin) + V31Call("f", "{}") + "junk" + std::string(kEnd) + " post";
  EXPECT_EQ(ParseAllSplits(kV31, text),
            Message("pre junk"s + std::string(kEnd) + " post", {{"call_0", "f", "{}"}}));
}

TEST(V31ToolCallTest, UnterminatedAtEndOfStream) {
  for (std::string text :
       {std::string(kBegin), std::string(kBegin) + "<｜tool▁call▁begin｜>f",
        std::string(kBegin) + "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}"}) {
    text = "x"s + text;
    EXPECT_EQ(ParseAllSplits(kV31, text), Message(text)) << text;
  }
  std::string done = std::string(kBegin) + V31Call("f", "{}");
  EXPECT_EQ(ParseAllSplits(kV31, done), Message("", {{"call_0", "f", "{}"}}));
}

TEST(V31ToolCallTest, OverlongNameIsMalformed) {
  std::string text = std::string(kBegin) + "<｜tool▁call▁begin｜>" + std::string(600, 'n');
  ToolCallParser parser({ToolCallDialect::kV31, ToolCallIdGenerator::Counter(), false, {}});
  ToolCallParserDelta d = parser.Feed(text);
  EXPECT_EQ(d.content, text);  // decided before the end of the stream
}

TEST(V3ToolCallTest, SingleAndMultipleCalls) {
  std::string one = "Let me look."s + Block({V3Call("get_weather", R"({"location": "Paris"})")});
  EXPECT_EQ(ParseAllSplits(kV3, one),
            Message("Let me look.", {{"call_0", "get_weather", R"({"location": "Paris"})"}}));
  std::string two =
      Block({V3Call("a", "{}"), V3Call("b", "{\n  \"n\": [1, {\"o\": null}]\n}")}, "\n");
  EXPECT_EQ(
      ParseAllSplits(kV3, two),
      Message("", {{"call_0", "a", "{}"}, {"call_1", "b", "{\n  \"n\": [1, {\"o\": null}]\n}"}}));
}

TEST(V3ToolCallTest, FenceInsideJsonString) {
  std::string text = Block({V3Call("write", R"({"md": "```py\nprint(1)\n```"})")});
  EXPECT_EQ(ParseAllSplits(kV3, text),
            Message("", {{"call_0", "write", R"({"md": "```py\nprint(1)\n```"})"}}));
}

TEST(V3ToolCallTest, UnicodeArguments) {
  std::string text = Block({V3Call("say", R"({"text": "你好，世界 👋🏽"})")});
  EXPECT_EQ(ParseAllSplits(kV3, text),
            Message("", {{"call_0", "say", R"({"text": "你好，世界 👋🏽"})"}}));
}

TEST(V3ToolCallTest, MalformedFallsBack) {
  const std::vector<std::string> bad_blocks = {
      Block({V3Call("f", "{bad}")}),
      Block({V3Call("f", "{}", "method")}),
      Block({"<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{}\n<｜tool▁call▁end｜>"}),  // no fence
      Block({"<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n<｜tool▁call▁end｜>"}),
      Block({V3Call("", "{}")}),
      Block({V31Call("f", "{}")}),  // the V3.1 shape is not V3
  };
  for (const auto& block : bad_blocks) {
    std::string text = "pre "s + block + " post";
    EXPECT_EQ(ParseAllSplits(kV3, text), Message(text)) << block;
  }
}

TEST(V3ToolCallTest, UnterminatedAtEndOfStream) {
  std::string text = "x"s + std::string(kBegin) + V3Call("f", "{}").substr(0, 60);
  EXPECT_EQ(ParseAllSplits(kV3, text), Message(text));
}

}  // namespace
}  // namespace peregrine::chat
