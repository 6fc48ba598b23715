// The Jinja subset against Python jinja2: every feature snippet and every chat template case
// (tools/chat_jinja_goldens.py) must render byte for byte the same, or fail where jinja2 fails.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "chat/jinja_template.h"

namespace peregrine::chat {
namespace {

using Json = nlohmann::ordered_json;

std::filesystem::path GoldenDir() { return std::filesystem::path(PEREGRINE_SOURCE_DIR) / "tests/unit/chat/golden"; }

Json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

void ExpectOutcome(const Result<std::string>& rendered, const Json& golden) {
  if (golden.contains("error")) {
    EXPECT_FALSE(rendered.ok()) << "jinja2 raised " << golden["error"] << " but this rendered: " << *rendered;
    return;
  }
  ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
  EXPECT_EQ(*rendered, golden["expected"].get<std::string>());
}

Result<std::string> ParseAndRender(const std::string& source, const Json& context) {
  PG_ASSIGN_OR_RETURN(JinjaTemplate tmpl, JinjaTemplate::Parse(source));
  return tmpl.Render(context);
}

TEST(JinjaParityTest, FeatureSnippetsMatchJinja2) {
  Json features = ReadJson(GoldenDir() / "jinja/features.json");
  ASSERT_GE(features.size(), 80u);
  for (const Json& f : features) {
    SCOPED_TRACE(f["name"].get<std::string>());
    ExpectOutcome(ParseAndRender(f["template"].get<std::string>(), f["context"]), f);
  }
}

class ChatTemplateParityTest : public testing::TestWithParam<const char*> {};

TEST_P(ChatTemplateParityTest, ConversationsMatchJinja2) {
  Json golden = ReadJson(GoldenDir() / ("jinja/chat_" + std::string(GetParam()) + ".json"));
  std::string source;
  if (golden.contains("template_file")) {
    source = ReadJson(GoldenDir() / golden["template_file"].get<std::string>())["chat_template"].get<std::string>();
  } else {
    source = golden["template"].get<std::string>();
  }
  auto tmpl = JinjaTemplate::Parse(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  ASSERT_GE(golden["cases"].size(), 10u);
  for (const Json& c : golden["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Json extra = golden["special_tokens"];
    if (c.contains("extra"))
      for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) extra[it.key()] = it.value();
    Json tools = c.contains("tools") ? c["tools"] : Json();
    ExpectOutcome(RenderChatTemplate(*tmpl, c["messages"], tools, c["add_generation_prompt"].get<bool>(), extra), c);
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateParityTest,
                         testing::Values("deepseek_v3", "deepseek_v3_1", "deepseek_v3_2_exp", "chatml_tools",
                                         "alternating_strict"));

}  // namespace
}  // namespace peregrine::chat
