// Forced DSML tool calls: the structural tag compiled by the grammar engine accepts exactly
// what the V4 encoder writes for calls of the given tools (so the model's trained format and
// the tool-call parser both agree with the grammar), and refuses other tools, wrongly typed or
// missing arguments, and a second call when parallel calls are off.
#include "chat/tool_call_grammar.h"

#include <gtest/gtest.h>

#include "chat/v4_format.h"
#include "structured/grammar_engine.h"

namespace peregrine::chat {
namespace {

using Json = nlohmann::ordered_json;
using structured::GrammarEngine;
using structured::GrammarKind;
using structured::GrammarMatcher;
using structured::GrammarSpec;

constexpr int32_t kStop = 256;

std::unique_ptr<GrammarEngine> ByteEngine() {
  structured::GrammarVocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.stop_token_ids = {kStop};
  auto e = GrammarEngine::Create(std::move(v));
  EXPECT_TRUE(e.ok());
  return std::move(*e);
}

// Bytes accepted before the first refusal; the stop token counts as one more.
size_t Accepted(GrammarMatcher& m, const std::string& text, bool then_stop) {
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.Accept(static_cast<unsigned char>(text[i]))) return i;
  return text.size() + (then_stop && m.Accept(kStop) ? 1 : 0);
}

const std::vector<GrammarTool> kTools = {
    {"get_weather",
     Json::parse(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},
                     "units":{"enum":["c","f"]}},"required":["city","days"]})")},
    {"ping", Json()},
};

std::shared_ptr<const structured::CompiledGrammar> Compile(GrammarEngine& e, const std::vector<GrammarTool>& tools,
                                                           bool parallel, int max_whitespace = -1) {
  auto tag = DsmlToolCallStructuralTag(tools, parallel, max_whitespace);
  EXPECT_TRUE(tag.ok()) << tag.status().ToString();
  GrammarSpec spec;
  spec.kind = GrammarKind::kStructuralTag;
  spec.source = *tag;
  auto g = e.Compile(spec);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

std::string Block(const std::vector<v4::ToolCall>& calls) {
  auto text = v4::RenderToolCallsBlock(calls);
  EXPECT_TRUE(text.ok());
  return *text;
}

TEST(ToolCallGrammarTest, AcceptsWhatTheEncoderWrites) {
  auto engine = ByteEngine();
  auto g = Compile(*engine, kTools, /*parallel=*/true);
  const std::vector<std::vector<v4::ToolCall>> cases = {
      {{"", "get_weather", Json{{"city", "Paris"}, {"days", 3}}}},
      {{"", "get_weather", Json{{"city", "São Paulo <b>"}, {"days", -1}, {"units", "f"}}}},
      {{"", "ping", Json::object()}},
      {{"", "get_weather", Json{{"city", "Oslo"}, {"days", 1}}}, {"", "ping", Json::object()}},
  };
  auto bounded = Compile(*engine, kTools, /*parallel=*/true, /*max_whitespace=*/33);
  for (const auto& calls : cases) {
    const std::string text = Block(calls);
    GrammarMatcher m(g);
    EXPECT_EQ(Accepted(m, text, true), text.size() + 1) << text;
    GrammarMatcher b(bounded);
    EXPECT_EQ(Accepted(b, text, true), text.size() + 1) << "bounded whitespace: " << text;
  }
  // A run of 40 blanks between two parameters: refused once whitespace is bounded.
  std::string padded = Block(cases[0]);
  const std::string close = "</" + std::string(v4::kDsml) + "parameter>";
  const size_t at = padded.find(close);
  ASSERT_NE(at, std::string::npos);
  padded.insert(at + close.size(), std::string(40, ' '));
  GrammarMatcher b(bounded);
  EXPECT_LT(Accepted(b, padded, true), padded.size());
}

TEST(ToolCallGrammarTest, RefusesOtherToolsTypesAndMissingArguments) {
  auto engine = ByteEngine();
  auto g = Compile(*engine, kTools, true);
  const std::string other = Block({{"", "delete_everything", Json::object()}});
  GrammarMatcher m1(g);
  EXPECT_LT(Accepted(m1, other, true), other.size());
  const std::string typed = Block({{"", "get_weather", Json{{"city", "Paris"}, {"days", "three"}}}});
  GrammarMatcher m2(g);
  EXPECT_LT(Accepted(m2, typed, true), typed.size());
  const std::string missing = Block({{"", "get_weather", Json{{"city", "Paris"}}}});
  GrammarMatcher m3(g);
  EXPECT_LT(Accepted(m3, missing, true), missing.size());
  const std::string bad_enum = Block({{"", "get_weather", Json{{"city", "Paris"}, {"days", 2}, {"units", "k"}}}});
  GrammarMatcher m4(g);
  EXPECT_LT(Accepted(m4, bad_enum, true), bad_enum.size());
  // Plain text is no tool call.
  GrammarMatcher m5(g);
  EXPECT_EQ(Accepted(m5, "Sure, the weather is", true), 0u);
}

TEST(ToolCallGrammarTest, OneCallOnlyWithoutParallelCalls) {
  auto engine = ByteEngine();
  auto single = Compile(*engine, kTools, /*parallel=*/false);
  const std::string one = Block({{"", "ping", Json::object()}});
  const std::string two = Block({{"", "ping", Json::object()}, {"", "ping", Json::object()}});
  GrammarMatcher a(single);
  EXPECT_EQ(Accepted(a, one, true), one.size() + 1);
  GrammarMatcher b(single);
  EXPECT_LT(Accepted(b, two, true), two.size());
}

TEST(ToolCallGrammarTest, ANamedToolChoiceAllowsOnlyThatTool) {
  auto engine = ByteEngine();
  auto g = Compile(*engine, {kTools[1]}, true);
  const std::string ping = Block({{"", "ping", Json::object()}});
  const std::string weather = Block({{"", "get_weather", Json{{"city", "Rome"}, {"days", 1}}}});
  GrammarMatcher a(g);
  EXPECT_EQ(Accepted(a, ping, true), ping.size() + 1);
  GrammarMatcher b(g);
  EXPECT_LT(Accepted(b, weather, true), weather.size());
}

TEST(ToolCallGrammarTest, BadToolsAreRefused) {
  EXPECT_FALSE(DsmlToolCallStructuralTag({}, true).ok());
  EXPECT_FALSE(DsmlToolCallStructuralTag({{"a\"b", Json()}}, true).ok());
  EXPECT_FALSE(DsmlToolCallStructuralTag({{"f", Json::array()}}, true).ok());
}

}  // namespace
}  // namespace peregrine::chat
