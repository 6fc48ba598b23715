#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "parser_split_harness.h"

namespace peregrine::chat {
namespace {

using namespace std::string_literals;

constexpr std::string_view kV4Block =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

OutputDelta Delta(std::string reasoning, std::string content,
                  std::vector<ToolCallDelta> calls = {}) {
  return {std::move(reasoning), std::move(content), std::move(calls)};
}

void ExpectDelta(const OutputDelta& got, const OutputDelta& want, std::string_view what) {
  EXPECT_EQ(got.reasoning_content, want.reasoning_content) << what;
  EXPECT_EQ(got.content, want.content) << what;
  EXPECT_EQ(got.tool_calls, want.tool_calls) << what;
}

TEST(OutputParserTest, ContentIsReleasedAsSoonAsItCannotBeMarkup) {
  OutputParser parser(ChatConfig(ModelDialect::kDeepSeekV4, true));
  ExpectDelta(parser.Feed("Hello"), Delta("", "Hello"), "plain text");
  ExpectDelta(parser.Feed(" <"), Delta("", " "), "'<' may open a block");
  ExpectDelta(parser.Feed("b>"), Delta("", "<b>"), "not a block after all");
  ExpectDelta(parser.Feed("\n"), Delta("", ""), "may be the separator");
  ExpectDelta(parser.Feed("\n"), Delta("", ""), "may be the separator");
  ExpectDelta(parser.Feed("x\n\n\n"), Delta("", "\n\nx\n"), "only two newlines are held");
  ExpectDelta(parser.Feed("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"), Delta("", ""),
              "inside a block");
  ExpectDelta(parser.Feed("</｜DSML｜invoke>"),
              Delta("", "", {{0, "call_0", "f", ""}, {0, "", "", "{}"}}), "call complete");
  ExpectDelta(parser.Feed("\n</｜DSML｜tool_calls>"), Delta("", ""), "block closed");
  ExpectDelta(parser.Feed(" after"), Delta("", " after"), "content after the block streams");
  ExpectDelta(parser.Finish(), Delta("", ""), "nothing left");
}

TEST(OutputParserTest, FinishReleasesHeldContent) {
  OutputParser parser(ChatConfig(ModelDialect::kDeepSeekV4, true));
  ExpectDelta(parser.Feed("2 <"), Delta("", "2 "), "held");
  ExpectDelta(parser.Finish(), Delta("", "<"), "released at the end");
}

TEST(OutputParserTest, StreamedCallsHaveTheOpenAiShape) {
  OutputParser parser(ThinkingConfig(ModelDialect::kDeepSeekV4, true));
  std::string text = "think</think>Sure." + std::string(kV4Block);
  OutputDelta all;
  for (char c : text) {
    OutputDelta d = parser.Feed(std::string_view(&c, 1));
    all.reasoning_content += d.reasoning_content;
    all.content += d.content;
    for (auto& t : d.tool_calls) all.tool_calls.push_back(t);
  }
  OutputDelta tail = parser.Finish();
  EXPECT_TRUE(tail.is_empty());
  EXPECT_EQ(all.reasoning_content, "think");
  EXPECT_EQ(all.content, "Sure.");
  ASSERT_EQ(all.tool_calls.size(), 2u);
  EXPECT_EQ(all.tool_calls[0], (ToolCallDelta{0, "call_0", "get_weather", ""}));
  EXPECT_EQ(all.tool_calls[1], (ToolCallDelta{0, "", "", R"({"city": "Paris", "days": 3})"}));
}

TEST(OutputParserTest, AllDialectsWithThinking) {
  struct Case {
    ModelDialect dialect;
    std::string block;
  };
  const std::vector<Case> cases = {
      {ModelDialect::kDeepSeekV4, std::string(kV4Block)},
      {ModelDialect::kDeepSeekV32,
       "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
       "{\"city\": \"Paris\", \"days\": 3}\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
      {ModelDialect::kDeepSeekV31,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
       "{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ModelDialect::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
  };
  for (const auto& c : cases) {
    std::string text = "Weather?</think>Checking." + c.block;
    ParsedOutput want{
        "Weather?", "Checking.", {{"call_0", "get_weather", R"({"city": "Paris", "days": 3})"}}};
    EXPECT_EQ(ParseAllSplits(ThinkingConfig(c.dialect, true), text), want) << c.block;
    // Without tools the same text is plain content.
    EXPECT_EQ(ParseAllSplits(ThinkingConfig(c.dialect, false), text),
              (ParsedOutput{"Weather?", "Checking." + c.block, {}}));
  }
}

TEST(OutputParserTest, RandomIdsAreDeterministicPerSeed) {
  ToolCallIdGenerator a = ToolCallIdGenerator::Random(42);
  ToolCallIdGenerator b = ToolCallIdGenerator::Random(42);
  ToolCallIdGenerator c = ToolCallIdGenerator::Random(43);
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string id = a.Next();
    ASSERT_EQ(id.size(), 5u + 24u);
    EXPECT_EQ(id.substr(0, 5), "call_");
    for (char ch : id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch))) << id;
    EXPECT_EQ(id, b.Next());
    EXPECT_NE(id, c.Next());
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 100u);
  ToolCallIdGenerator counter = ToolCallIdGenerator::Counter();
  EXPECT_EQ(counter.Next(), "call_0");
  EXPECT_EQ(counter.Next(), "call_1");
}

TEST(OutputParserTest, RandomIdsMatchBetweenStreamingAndWholeText) {
  OutputParserConfig config = ChatConfig(ModelDialect::kDeepSeekV4, true);
  config.tool_call_ids = ToolCallIdGenerator::Random(7);
  std::string text = "x"s + std::string(kV4Block) + std::string(kV4Block);
  ParsedOutput whole = ParseAllSplits(config, text);
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  EXPECT_NE(whole.tool_calls[0].id, whole.tool_calls[1].id);
}

std::vector<ToolSpec> WeatherTools() {
  auto specs = ToolSpecsFromOpenAi(nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"]}},
      "required": ["city"]}}}])"));
  EXPECT_TRUE(specs.ok()) << specs.status().ToString();
  return specs.ok() ? *specs : std::vector<ToolSpec>{};
}

TEST(OutputParserTest, ValidationAgainstTools) {
  OutputParserConfig config = ChatConfig(ModelDialect::kDeepSeekV4, true);
  config.validate_tool_calls = true;
  config.tools = WeatherTools();
  auto block = [](std::string_view name, std::string_view params) {
    return "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\""s + std::string(name) + "\">\n" +
           std::string(params) + "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  };
  const std::string city =
      "<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>";
  const std::string days =
      "<｜DSML｜parameter name=\"days\" string=\"false\">2.0</｜DSML｜parameter>";
  EXPECT_EQ(
      ParseAllSplits(config, block("get_weather", city + days)),
      (ParsedOutput{"", "", {{"call_0", "get_weather", R"({"city": "Oslo", "days": 2.0})"}}}));
  for (const std::string& bad :
       {block("get_time", city),                // unknown tool
        block("get_weather", days),             // missing required
        block("get_weather", "{\"city\": 5}"),  // wrong type
        block("get_weather", city + "<｜DSML｜parameter name=\"days\" "
                                    "string=\"true\">2</｜DSML｜parameter>")}) {
    EXPECT_EQ(ParseAllSplits(config, bad), (ParsedOutput{"", bad, {}})) << bad;
  }
  // Without validation the same calls are accepted.
  config.validate_tool_calls = false;
  EXPECT_EQ(ParseAllSplits(config, block("get_time", city)).tool_calls.size(), 1u);
}

TEST(ToolSpecTest, FromOpenAi) {
  auto ok = ToolSpecsFromOpenAi(nlohmann::json::parse(
      R"([{"type": "function", "function": {"name": "a"}},)"
      R"( {"name": "b", "parameters": {"type": "object"}}])"));
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].name, "a");
  EXPECT_EQ((*ok)[1].parameters["type"], "object");
  EXPECT_FALSE(ToolSpecsFromOpenAi(nlohmann::json::parse(R"({"name": "a"})")).ok());
  EXPECT_FALSE(ToolSpecsFromOpenAi(nlohmann::json::parse(R"([{"function": {"name": 3}}])")).ok());
  EXPECT_FALSE(ToolSpecsFromOpenAi(nlohmann::json::parse(R"([1])")).ok());
}

TEST(ToolSpecTest, ValidateToolCall) {
  std::vector<ToolSpec> tools = WeatherTools();
  EXPECT_TRUE(ValidateToolCall(tools, "get_weather", R"({"city": "x", "days": null})").ok());
  EXPECT_TRUE(ValidateToolCall(tools, "get_weather", R"({"city": "x", "extra": [1]})").ok());
  EXPECT_FALSE(ValidateToolCall(tools, "get_weather", R"({"city": "x", "days": 1.5})").ok());
  EXPECT_FALSE(ValidateToolCall(tools, "get_weather", R"([1])").ok());
  EXPECT_FALSE(ValidateToolCall(tools, "get_weather", R"({"city": )").ok());
  EXPECT_EQ(ValidateToolCall(tools, "nope", "{}").code(), StatusCode::kInvalidArgument);
}

TEST(OutputParserTest, LongArgumentsParseInLinearTime) {
  // A 4 MiB string value fed in 3-byte pieces: quadratic rescanning would take minutes.
  std::string value(4 << 20, 'a');
  std::string text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"w\">\n"
      "<｜DSML｜parameter name=\"data\" string=\"true\">" +
      value + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  OutputParser parser(ThinkingConfig(ModelDialect::kDeepSeekV4, true));
  ParsedOutput message;
  for (size_t i = 0; i < text.size(); i += 3) {
    AppendOutputDelta(parser.Feed(std::string_view(text).substr(i, 3)), &message);
  }
  AppendOutputDelta(parser.Finish(), &message);
  ASSERT_EQ(message.tool_calls.size(), 1u);
  EXPECT_EQ(message.tool_calls[0].arguments.size(), value.size() + 12);
}

}  // namespace
}  // namespace peregrine::chat
