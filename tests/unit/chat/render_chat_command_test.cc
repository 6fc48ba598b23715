// `peregrine render-chat`: request parsing, both renderers, and the command wiring end to end.
#include "cli/render_chat_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace peregrine::cli {
namespace {

using Json = nlohmann::ordered_json;

std::filesystem::path GoldenDir() { return std::filesystem::path(PEREGRINE_SOURCE_DIR) / "tests/unit/chat/golden"; }

Json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

TEST(RenderChatCommandTest, EncodesWithTheV4EncoderByDefault) {
  Json golden = ReadJson(GoldenDir() / "v4/tools_thinking_system.json");
  Json request = {{"messages", golden["messages"]}, {"tools", golden["tools"]}, {"options", golden["options"]}};
  auto prompt = RenderChatRequest(request, {}, std::nullopt, Json::object());
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(*prompt, golden["expected"].get<std::string>());

  RenderChatOverrides chat_mode;
  chat_mode.thinking = false;
  auto chat = RenderChatRequest(request, chat_mode, std::nullopt, Json::object());
  ASSERT_TRUE(chat.ok());
  EXPECT_NE(*chat, *prompt);
  EXPECT_EQ(chat->substr(chat->size() - 8), "</think>");
}

TEST(RenderChatCommandTest, RejectsMalformedRequests) {
  EXPECT_FALSE(RenderChatRequest(Json::array(), {}, std::nullopt, Json::object()).ok());
  EXPECT_FALSE(RenderChatRequest(Json::object(), {}, std::nullopt, Json::object()).ok());
  Json bad_options = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}, {"options", {{"thinking", "yes"}}}};
  EXPECT_EQ(RenderChatRequest(bad_options, {}, std::nullopt, Json::object()).status().message(),
            "options.thinking must be a boolean");
  RenderChatOverrides bad_effort;
  bad_effort.reasoning_effort = "ultra";
  bad_options.erase("options");
  EXPECT_FALSE(RenderChatRequest(bad_options, bad_effort, std::nullopt, Json::object()).ok());
}

TEST(RenderChatCommandTest, CommandRendersAJinjaTemplateFromATokenizerConfig) {
  Json golden = ReadJson(GoldenDir() / "jinja/chat_deepseek_v3_1.json");
  const Json* case_json = nullptr;
  for (const Json& c : golden["cases"])
    if (c["name"] == "tool_round_trip") case_json = &c;
  ASSERT_NE(case_json, nullptr);
  Json request = {{"messages", (*case_json)["messages"]}, {"tools", (*case_json)["tools"]}};
  auto request_path = std::filesystem::temp_directory_path() / "peregrine_render_chat_request.json";
  std::ofstream(request_path) << request.dump();

  CLI::App app("test");
  AddRenderChatCommand(app);
  std::string template_path = (GoldenDir() / "templates/deepseek_v3_1.tokenizer_config.json").string();
  std::vector<std::string> args = {"peregrine", "render-chat", request_path.string(), "--template", template_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  app.parse(static_cast<int>(argv.size()), argv.data());
  std::string printed = testing::internal::GetCapturedStdout();
  std::filesystem::remove(request_path);
  EXPECT_EQ(printed, (*case_json)["expected"].get<std::string>());
}

TEST(RenderChatCommandTest, CommandFailsWithANonZeroCode) {
  auto request_path = std::filesystem::temp_directory_path() / "peregrine_render_chat_bad.json";
  std::ofstream(request_path) << R"({"messages": [{"role": "wizard", "content": "x"}]})";
  CLI::App app("test");
  AddRenderChatCommand(app);
  std::vector<std::string> args = {"peregrine", "render-chat", request_path.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  EXPECT_THROW(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::RuntimeError);
  std::string err = testing::internal::GetCapturedStderr();
  std::filesystem::remove(request_path);
  EXPECT_NE(err.find("unknown message role"), std::string::npos) << err;
}

}  // namespace
}  // namespace peregrine::cli
