// DeepSeek-V4 encoder: byte-for-byte against goldens from the reference encoder
// (tools/chat_v4_goldens.py), plus the error contract.
#include "chat/v4_encoder.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace peregrine::chat {
namespace {

using Json = nlohmann::ordered_json;

std::filesystem::path GoldenDir() {
  return std::filesystem::path(PEREGRINE_SOURCE_DIR) / "tests/unit/chat/golden/v4";
}

Json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

V4EncodeOptions OptionsFrom(const Json& json) {
  V4EncodeOptions options;
  options.thinking = json.value("thinking", false);
  options.drop_thinking = json.value("drop_thinking", true);
  options.add_generation_prompt = json.value("add_generation_prompt", true);
  if (json.contains("reasoning_effort") && json["reasoning_effort"].is_string()) {
    auto effort = ParseV4ReasoningEffort(json["reasoning_effort"].get<std::string>());
    EXPECT_TRUE(effort.ok());
    if (effort.ok()) options.reasoning_effort = *effort;
  }
  return options;
}

TEST(V4EncoderTest, MatchesReferenceGoldens) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenDir()))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  ASSERT_GE(files.size(), 20u) << "golden conversations missing under " << GoldenDir();
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    Json golden = ReadJson(file);
    Json tools = golden.contains("tools") ? golden["tools"] : Json();
    auto prompt = EncodeV4Prompt(golden["messages"], tools, OptionsFrom(golden["options"]));
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    EXPECT_EQ(*prompt, golden["expected"].get<std::string>());
  }
}

Status EncodeError(const char* messages_json) {
  auto result = EncodeV4Prompt(Json::parse(messages_json), Json(), V4EncodeOptions{});
  return result.ok() ? Status::Ok() : result.status();
}

TEST(V4EncoderTest, RejectsMalformedInput) {
  struct Case {
    const char* messages;
    const char* message;
  };
  const Case cases[] = {
      {R"({"role":"user"})", "messages must be an array"},
      {R"([])", "messages must not be empty"},
      {R"([1])", "message must be a JSON object"},
      {R"([{"content":"x"}])", "message role must be a string"},
      {R"([{"role":"wizard","content":"x"}])", "unknown message role"},
      {R"([{"role":"user","content":5}])", "message content must be a string, an array of text parts or null"},
      {R"([{"role":"user","content":[{"type":"image_url"}]}])", "unsupported message content part"},
      {R"([{"role":"developer","content":""}])", "developer message needs non-empty content"},
      {R"([{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}])", "tool call must have a name"},
      {R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{not json"}}]}])",
       "tool call arguments must be a JSON object"},
      {R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1,2]"}}]}])",
       "tool call arguments must be a JSON object"},
      {R"([{"role":"assistant","tool_calls":[{"type":"function"}]}])", "tool call must have a function object"},
      {R"([{"role":"assistant","reasoning_content":7}])", "reasoning_content must be a string"},
      {R"([{"role":"system","content":"s","tools":[{"type":"function"}]}])",
       "tool definition must have a function object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.messages);
    Status status = EncodeError(c.messages);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), c.message);
  }
}

TEST(V4EncoderTest, RejectsMalformedRequestTools) {
  Json messages = Json::parse(R"([{"role":"user","content":"hi"}])");
  auto result = EncodeV4Prompt(messages, Json::parse(R"({"type":"function"})"), V4EncodeOptions{});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "tools must be an array");
}

TEST(V4EncoderTest, ParsesReasoningEffort) {
  EXPECT_EQ(*ParseV4ReasoningEffort(""), V4ReasoningEffort::kNone);
  EXPECT_EQ(*ParseV4ReasoningEffort("medium"), V4ReasoningEffort::kNone);
  EXPECT_EQ(*ParseV4ReasoningEffort("high"), V4ReasoningEffort::kHigh);
  EXPECT_EQ(*ParseV4ReasoningEffort("max"), V4ReasoningEffort::kMax);
  EXPECT_FALSE(ParseV4ReasoningEffort("extreme").ok());
}

TEST(V4EncoderTest, EmptyToolsListAddsNoBlock) {
  Json messages = Json::parse(R"([{"role":"user","content":"hi"}])");
  auto result = EncodeV4Prompt(messages, Json::array(), V4EncodeOptions{});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(*result, "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
}

// continue_final_message: the last assistant turn is the rendering of the whole conversation
// minus its end-of-sentence; with only reasoning in thinking mode, minus the </think> too.
TEST(V4EncoderTest, ContinueFinalMessageLeavesTheTurnOpen) {
  const Json messages = Json::parse(
      R"([{"role":"user","content":"Write a haiku."},{"role":"assistant","content":"Autumn moon"}])");
  for (bool thinking : {false, true}) {
    V4EncodeOptions closed;
    closed.thinking = thinking;
    Result<std::string> whole = EncodeV4Prompt(messages, Json(), closed);
    ASSERT_TRUE(whole.ok());
    V4EncodeOptions open = closed;
    open.add_generation_prompt = false;
    open.continue_final_message = true;
    Result<std::string> continued = EncodeV4Prompt(messages, Json(), open);
    ASSERT_TRUE(continued.ok()) << continued.status().ToString();
    const std::string eos = "<｜end▁of▁sentence｜>";
    ASSERT_TRUE(whole->ends_with(eos));
    EXPECT_EQ(*continued, whole->substr(0, whole->size() - eos.size())) << thinking;
    EXPECT_TRUE(continued->ends_with("Autumn moon"));
  }
  const Json reasoning_only = Json::parse(
      R"([{"role":"user","content":"hi"},{"role":"assistant","content":"","reasoning_content":"Let me"}])");
  V4EncodeOptions open;
  open.thinking = true;
  open.add_generation_prompt = false;
  open.continue_final_message = true;
  Result<std::string> thinking = EncodeV4Prompt(reasoning_only, Json(), open);
  ASSERT_TRUE(thinking.ok());
  EXPECT_TRUE(thinking->ends_with("<｜Assistant｜><think>Let me")) << *thinking;

  // Refused: a user message last, or a generation prompt asked for too.
  EXPECT_FALSE(EncodeV4Prompt(Json::parse(R"([{"role":"user","content":"hi"}])"), Json(), open).ok());
  open.add_generation_prompt = true;
  EXPECT_FALSE(EncodeV4Prompt(messages, Json(), open).ok());
}

}  // namespace
}  // namespace peregrine::chat
