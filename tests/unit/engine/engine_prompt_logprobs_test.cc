// Prompt logprobs through the engine and scheduler with the fake runner: every prompt token
// after the first scored once, in order, on the first event; chunks bounded by the runner's
// scored rows; no prefix reuse before the prompt is scored; score-only requests
// (max_tokens 0); preemption and overlapped steps.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "fake_runner.h"

namespace peregrine {
namespace {

using namespace engine_testing;  // NOLINT: the tests' own helpers

struct Scored {
  Collected out;
  std::vector<SampleResult> prompt;
  int events_with_prompt = 0;
  int first_event_with_prompt = -1;
};

Status SubmitScored(Engine& engine, EngineRequest r, Scored& s) {
  return engine.Submit(std::move(r), [&s](const EngineEvent& ev) {
    ++s.out.events;
    s.out.tokens.insert(s.out.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) s.out.finish = ev.finish;
    if (!ev.prompt_logprobs.empty()) {
      ++s.events_with_prompt;
      if (s.first_event_with_prompt < 0) s.first_event_with_prompt = s.out.events;
      s.prompt = ev.prompt_logprobs;
    }
  });
}

// What ScoreToken gives for every prompt token after the first under the fake model.
std::vector<SampleResult> ExpectedScores(const std::vector<int32_t>& prompt, int32_t num_top) {
  std::vector<SampleResult> out;
  for (size_t p = 0; p + 1 < prompt.size(); ++p)
    out.push_back(ScoreToken(FakeRunner::RowAfter(prompt[p], static_cast<int64_t>(p)), prompt[p + 1], num_top));
  return out;
}

void ExpectSameScores(const std::vector<SampleResult>& got, const std::vector<SampleResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, want[i].token) << i;
    EXPECT_EQ(got[i].logprob, want[i].logprob) << i;
    EXPECT_EQ(got[i].rank, want[i].rank) << i;
    ASSERT_EQ(got[i].top_logprobs.size(), want[i].top_logprobs.size()) << i;
    for (size_t k = 0; k < got[i].top_logprobs.size(); ++k) {
      EXPECT_EQ(got[i].top_logprobs[k].token, want[i].top_logprobs[k].token);
      EXPECT_EQ(got[i].top_logprobs[k].logprob, want[i].top_logprobs[k].logprob);
    }
  }
}

TEST(EnginePromptLogprobsTest, ScoresEveryPromptTokenOnceOnTheFirstEvent) {
  for (const bool overlap : {false, true}) {
    auto runner = std::make_unique<FakeRunner>();
    runner->overlap = overlap;
    runner->scored_rows_per_step = 24;
    FakeRunner* fake = runner.get();
    Engine engine(Config(/*budget=*/64), std::move(runner));
    const std::vector<int32_t> prompt = Prompt(70, 5);
    EngineRequest r = Request("scored", prompt, 6);
    r.prompt_logprobs = 3;
    Scored scored;
    Collected plain;
    ASSERT_TRUE(SubmitScored(engine, std::move(r), scored).ok());
    ASSERT_TRUE(Submit(engine, Request("plain", Prompt(30, 6), 6), plain).ok());
    RunToCompletion(engine);
    EXPECT_EQ(scored.out.tokens, Expected(prompt, 6)) << overlap;
    EXPECT_EQ(plain.tokens, Expected(Prompt(30, 6), 6));
    EXPECT_EQ(scored.events_with_prompt, 1);
    EXPECT_EQ(scored.first_event_with_prompt, 1);
    ExpectSameScores(scored.prompt, ExpectedScores(prompt, 3));
    // 70 rows under a budget of 24 scored rows per step: chunks of at most 24 tokens.
    int64_t targets = 0;
    for (const FakeRunner::ScoredChunk& c : fake->scored_chunks) targets += c.num_targets;
    EXPECT_EQ(targets, 69);
    EXPECT_GE(fake->scored_chunks.size(), 3u);
  }
}

TEST(EnginePromptLogprobsTest, ScoreOnlyRequestsFinishWithTheirScores) {
  Engine engine(Config(/*budget=*/32), std::make_unique<FakeRunner>());
  const std::vector<int32_t> prompt = Prompt(40, 9);
  EngineRequest r = Request("score-only", prompt, 0);
  r.prompt_logprobs = 0;
  Scored s;
  ASSERT_TRUE(SubmitScored(engine, std::move(r), s).ok());
  // A one-token prompt has nothing to score and still finishes.
  EngineRequest one = Request("one", {7}, 0);
  one.prompt_logprobs = 1;
  Scored single;
  ASSERT_TRUE(SubmitScored(engine, std::move(one), single).ok());
  RunToCompletion(engine);
  EXPECT_TRUE(s.out.tokens.empty());
  ASSERT_TRUE(s.out.finish.has_value());
  EXPECT_EQ(*s.out.finish, FinishReason::kLength);
  EXPECT_EQ(s.out.events, 1);
  ExpectSameScores(s.prompt, ExpectedScores(prompt, 0));
  ASSERT_TRUE(single.out.finish.has_value());
  EXPECT_EQ(*single.out.finish, FinishReason::kLength);
  EXPECT_TRUE(single.prompt.empty());
  EXPECT_EQ(engine.Stats().num_running, 0);
  EXPECT_DOUBLE_EQ(engine.Stats().kv_usage, 0.0);
  // Without prompt logprobs max_tokens 0 is still refused.
  Collected refused;
  EXPECT_FALSE(Submit(engine, Request("zero", prompt, 0), refused).ok());
}

TEST(EnginePromptLogprobsTest, ScoredPromptsSkipThePrefixCacheButFillIt) {
  auto runner = std::make_unique<FakeRunner>(/*num_blocks=*/64, /*num_snapshots=*/16);
  FakeRunner* fake = runner.get();
  Engine engine(Config(/*budget=*/64), std::move(runner));
  const std::vector<int32_t> prompt = Prompt(50, 2);
  Collected first;
  ASSERT_TRUE(Submit(engine, Request("first", prompt, 4), first).ok());
  RunToCompletion(engine);
  EngineRequest r = Request("scored", prompt, 4);
  r.prompt_logprobs = 2;
  Scored scored;
  ASSERT_TRUE(SubmitScored(engine, std::move(r), scored).ok());
  RunToCompletion(engine);
  EXPECT_EQ(fake->restores, 0);  // the cached prefix was not used
  ExpectSameScores(scored.prompt, ExpectedScores(prompt, 2));
  EXPECT_EQ(scored.out.tokens, first.tokens);
  // The scored request's blocks are there for the next plain one.
  Collected again;
  ASSERT_TRUE(Submit(engine, Request("again", prompt, 4), again).ok());
  RunToCompletion(engine);
  EXPECT_EQ(fake->restores, 1);
  EXPECT_EQ(again.tokens, first.tokens);
}

TEST(EnginePromptLogprobsTest, PreemptionDoesNotRepeatOrLoseScores) {
  // 10 pages of 16 tokens: four 40-token prompts growing to 70 preempt each other.
  auto runner = std::make_unique<FakeRunner>(10);
  runner->scored_rows_per_step = 256;
  Engine engine(Config(64), std::move(runner));
  std::vector<Scored> out(4);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Prompt(40, i + 10));
    EngineRequest r = Request(Name("p", i), prompts.back(), 30);
    r.prompt_logprobs = 1;
    ASSERT_TRUE(SubmitScored(engine, std::move(r), out[static_cast<size_t>(i)]).ok());
  }
  RunToCompletion(engine);
  EXPECT_GT(engine.Stats().num_preemptions, 0);
  for (int i = 0; i < 4; ++i) {
    const Scored& s = out[static_cast<size_t>(i)];
    EXPECT_EQ(s.out.tokens, Expected(prompts[static_cast<size_t>(i)], 30)) << i;
    EXPECT_EQ(s.events_with_prompt, 1) << i;
    ExpectSameScores(s.prompt, ExpectedScores(prompts[static_cast<size_t>(i)], 1));
  }
}

TEST(EnginePromptLogprobsTest, RefusesWhatItCannotScore) {
  auto runner = std::make_unique<FakeRunner>();
  runner->scored_rows_per_step = 0;
  Engine engine(Config(64), std::move(runner));
  EngineRequest r = Request("r", Prompt(10, 1), 4);
  r.prompt_logprobs = 1;
  Collected out;
  EXPECT_EQ(Submit(engine, r, out).code(), StatusCode::kInvalidArgument);
  Engine other(Config(64), std::make_unique<FakeRunner>());
  r.prompt_logprobs = kMaxScoreAlternatives + 1;
  EXPECT_EQ(Submit(other, r, out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
