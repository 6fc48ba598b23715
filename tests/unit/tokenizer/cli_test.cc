// The tokenize/detokenize subcommands (src/cli/tokenize_command.cc, compiled into this test).
#include "cli/tokenize_command.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "test_util.h"

namespace peregrine::cli {
namespace {

const tokenizer::Tokenizer& Tiny() {
  static const tokenizer::Tokenizer* t = new tokenizer::Tokenizer(
      tokenizer::Tokenizer::FromFile(tokenizer::testing::TinyTokenizerPath()).value());
  return *t;
}

// Runs `peregrine <args...>` through CLI11 and returns what it printed.
std::string RunCli(std::vector<std::string> args) {
  CLI::App app{"test"};
  app.require_subcommand(1);
  AddTokenizerCommands(app);
  std::ostringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::Error& e) {
    std::cout.rdbuf(old);
    return "error " + std::to_string(e.get_exit_code());
  }
  std::cout.rdbuf(old);
  return captured.str();
}

TEST(TokenizeCommandTest, FormatsIds) {
  EXPECT_EQ(TokenizeToString(Tiny(), "Hello world", {}).value(), "39 316 75 78 524 338\n");
  TokenizeFlags json;
  json.json = true;
  EXPECT_EQ(TokenizeToString(Tiny(), "<|bos|>", json).value(), "[700]\n");
  TokenizeFlags tokens;
  tokens.show_tokens = true;
  EXPECT_EQ(TokenizeToString(Tiny(), " wor", tokens).value(), "524\tĠwor\n");
}

TEST(TokenizeCommandTest, ParsesAndValidatesIds) {
  EXPECT_EQ(DetokenizeString(Tiny(), "39 316,75\n78 [524, 338]", false).value(), "Hello world");
  EXPECT_EQ(DetokenizeString(Tiny(), "700 39", true).value(), "H");
  for (std::string_view bad : {"12x", "-1", "711", "abc", "99999999999999999999"}) {
    auto r = DetokenizeString(Tiny(), bad, false);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(TokenizeCommandTest, RunsThroughCli11) {
  const std::string path = tokenizer::testing::TinyTokenizerPath().string();
  EXPECT_EQ(RunCli({"tokenize", "--tokenizer", path, "Hello", "world"}), "39 316 75 78 524 338\n");
  EXPECT_EQ(RunCli({"tokenize", "--tokenizer", path, "--no-parse-special", "--json", "<|a|>"}),
            "[27, 91, 64, 91, 29]\n");
  EXPECT_EQ(RunCli({"detokenize", "--tokenizer", path, "39", "316", "75", "78"}), "Hello");
  EXPECT_EQ(RunCli({"detokenize", "--tokenizer", path, "--stream", "--skip-special-tokens",
                    "700,39,316"}),
            "Hel");
  EXPECT_EQ(RunCli({"detokenize", "--tokenizer", path, "5000"}), "error 1");
  EXPECT_EQ(RunCli({"tokenize", "--tokenizer", "/nonexistent", "x"}), "error 1");
}

}  // namespace
}  // namespace peregrine::cli
