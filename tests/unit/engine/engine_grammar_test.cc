// Structured outputs and min_tokens in the engine with the fake runner: grammar masks at
// launch and deferred behind an overlapped step, a runner that cannot wait, a trigger token,
// max_tokens and ignore_eos against a grammar; EOS held back by min_tokens.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <regex>

#include "base/check.h"
#include "fake_runner.h"
#include "structured/grammar_engine.h"

namespace peregrine {
namespace {

using namespace engine_testing;  // NOLINT: the tests' own helpers

// Structured outputs: a grammar over the fake vocabulary (id -> one letter, EOS the stop token).
std::string TokenText(int32_t id) { return id == kEos ? std::string() : std::string(1, static_cast<char>('a' + id % 26)); }

std::shared_ptr<const structured::CompiledGrammar> Grammar(structured::GrammarKind kind, const std::string& source) {
  static const std::unique_ptr<structured::GrammarEngine> engine = [] {
    structured::GrammarVocabulary v;
    for (int32_t id = 0; id < kVocab; ++id) v.token_bytes.push_back(TokenText(id));
    v.stop_token_ids = {kEos};
    auto e = structured::GrammarEngine::Create(std::move(v));
    PG_CHECK(e.ok(), "grammar engine");
    return std::move(*e);
  }();
  structured::GrammarSpec spec;
  spec.kind = kind;
  spec.source = source;
  auto g = engine->Compile(spec);
  PG_CHECK(g.ok(), "grammar compile");
  return *g;
}

std::string Text(const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens) out += TokenText(t);
  return out;
}

struct GrammarRun {
  std::vector<Collected> out;
  int64_t ready = 0, deferred = 0;
};

// Six requests under `regex`, run to completion.
GrammarRun RunGrammar(bool overlap, bool defers, const std::string& regex, int64_t max_tokens = 40) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = overlap;
  runner->defers = defers;
  FakeRunner* fake = runner.get();
  Engine engine(Config(64), std::move(runner));
  auto grammar = Grammar(structured::GrammarKind::kRegex, regex);
  GrammarRun run;
  run.out.resize(6);
  for (int k = 0; k < 6; ++k) {
    EngineRequest r = Request(Name("g", k), Prompt(5 + k, k), max_tokens);
    r.grammar = grammar;
    EXPECT_TRUE(Submit(engine, std::move(r), run.out[static_cast<size_t>(k)]).ok());
  }
  RunToCompletion(engine);
  run.ready = fake->ready_masks;
  run.deferred = fake->deferred_masks;
  return run;
}

void ExpectMatches(const Collected& c, const std::string& regex, int k) {
  ASSERT_EQ(c.finish, FinishReason::kStop) << k;
  ASSERT_FALSE(c.tokens.empty()) << k;
  EXPECT_EQ(c.tokens.back(), kEos) << k << ": a completed grammar ends on the stop token";
  const std::vector<int32_t> body(c.tokens.begin(), c.tokens.end() - 1);
  EXPECT_TRUE(std::regex_match(Text(body), std::regex(regex))) << k << ": " << Text(body);
}

TEST(EngineGrammarTest, EveryOutputMatchesAndEndsWithTheGrammar) {
  const std::string regex = "[a-f]{3}(x|yz)[0-9]?";
  const GrammarRun run = RunGrammar(/*overlap=*/false, true, regex);
  for (int k = 0; k < 6; ++k) ExpectMatches(run.out[static_cast<size_t>(k)], regex, k);
  EXPECT_GT(run.ready, 0);
  EXPECT_EQ(run.deferred, 0);
}

TEST(EngineGrammarTest, OverlappedStepsDeferTheMasksAndGiveTheSameTokens) {
  const std::string regex = "[a-f]{3}(x|yz)";
  const GrammarRun sync = RunGrammar(false, true, regex);
  const GrammarRun overlapped = RunGrammar(true, true, regex);
  EXPECT_GT(overlapped.deferred, 0) << "decodes planned ahead get their masks once the previous token is known";
  for (int k = 0; k < 6; ++k) {
    ExpectMatches(overlapped.out[static_cast<size_t>(k)], regex, k);
    EXPECT_EQ(overlapped.out[static_cast<size_t>(k)].tokens, sync.out[static_cast<size_t>(k)].tokens) << k;
  }
}

TEST(EngineGrammarTest, ARunnerThatCannotWaitIsCollectedFirst) {
  const std::string regex = "[g-p]{2,5}q";
  const GrammarRun sync = RunGrammar(false, true, regex);
  const GrammarRun collected_first = RunGrammar(true, /*defers=*/false, regex);
  EXPECT_EQ(collected_first.deferred, 0);
  for (int k = 0; k < 6; ++k) {
    ExpectMatches(collected_first.out[static_cast<size_t>(k)], regex, k);
    EXPECT_EQ(collected_first.out[static_cast<size_t>(k)].tokens, sync.out[static_cast<size_t>(k)].tokens) << k;
  }
}

TEST(EngineGrammarTest, MaxTokensCutsAnUnfinishedGrammar) {
  const GrammarRun run = RunGrammar(true, true, "[a-c]{10}", /*max_tokens=*/4);
  for (int k = 0; k < 6; ++k) {
    const Collected& c = run.out[static_cast<size_t>(k)];
    EXPECT_EQ(c.finish, FinishReason::kLength) << k;
    ASSERT_EQ(c.tokens.size(), 4u) << k;
    EXPECT_TRUE(std::regex_match(Text(c.tokens), std::regex("[a-c]{4}"))) << k;
  }
}

TEST(EngineGrammarTest, TheGrammarStartsAfterItsTriggerToken) {
  for (bool overlap : {false, true}) {
    const std::vector<int32_t> prompt = Prompt(9, 2);
    const std::vector<int32_t> free = Expected(prompt, 3);
    ASSERT_EQ(free.size(), 3u);
    ASSERT_NE(free[0], free[2]);
    ASSERT_NE(free[1], free[2]);
    auto runner = std::make_unique<FakeRunner>();
    runner->overlap = overlap;
    Engine engine(Config(64), std::move(runner));
    EngineRequest r = Request("t", prompt, 40);
    r.grammar = Grammar(structured::GrammarKind::kRegex, "[u-w]{4}");
    r.grammar_after = free[2];
    Collected c;
    ASSERT_TRUE(Submit(engine, std::move(r), c).ok());
    RunToCompletion(engine);
    ASSERT_EQ(c.finish, FinishReason::kStop) << overlap;
    ASSERT_EQ(c.tokens.size(), 3u + 4u + 1u) << overlap;
    EXPECT_EQ(std::vector<int32_t>(c.tokens.begin(), c.tokens.begin() + 3), free) << "free until the trigger";
    EXPECT_TRUE(std::regex_match(Text({c.tokens.begin() + 3, c.tokens.end() - 1}), std::regex("[u-w]{4}")));
    EXPECT_EQ(c.tokens.back(), kEos);
  }
}

TEST(EngineGrammarTest, ACompletedGrammarStopsEvenWhenEosIsIgnored) {
  auto runner = std::make_unique<FakeRunner>();
  runner->overlap = true;
  Engine engine(Config(64), std::move(runner));
  EngineRequest r = Request("c", Prompt(6, 1), 40);
  r.grammar = Grammar(structured::GrammarKind::kRegex, "(abc|de)");
  r.ignore_eos = true;
  Collected c;
  ASSERT_TRUE(Submit(engine, std::move(r), c).ok());
  RunToCompletion(engine);
  ExpectMatches(c, "(abc|de)", 0);
}

// min_tokens: the fake model follows 42 with EOS; a prompt ending in 42 would stop at once.
TEST(EngineTest, MinTokensHoldsEosBackForThatManyTokens) {
  for (bool overlap : {false, true}) {
    auto runner = std::make_unique<FakeRunner>();
    runner->overlap = overlap;
    Engine engine(Config(64), std::move(runner));
    Collected plain, held, stop_id;
    ASSERT_TRUE(Submit(engine, Request("plain", {5, 42}, 10), plain).ok());
    EngineRequest r = Request("held", {5, 42}, 10);
    r.sampling.min_tokens = 3;
    ASSERT_TRUE(Submit(engine, std::move(r), held).ok());
    EngineRequest s = Request("stop", {5, 7}, 10);
    s.stop_token_ids = {NextToken(7, 1)};  // its first token would stop it
    s.sampling.min_tokens = 2;
    ASSERT_TRUE(Submit(engine, std::move(s), stop_id).ok());
    RunToCompletion(engine);
    EXPECT_EQ(plain.tokens, std::vector<int32_t>{kEos}) << overlap;
    ASSERT_GE(held.tokens.size(), 4u) << overlap;
    for (size_t i = 0; i < 3; ++i) EXPECT_NE(held.tokens[i], kEos) << overlap << " token " << i;
    EXPECT_TRUE(held.finish.has_value());
    ASSERT_GE(stop_id.tokens.size(), 2u) << overlap;
    EXPECT_NE(stop_id.tokens[0], NextToken(7, 1)) << overlap;
  }
}

}  // namespace
}  // namespace peregrine
