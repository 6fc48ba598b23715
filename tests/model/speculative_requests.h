// What the speculative engine tests share (speculative_engine_test on the CPU backend,
// cuda_speculative_test on the GPU): requests over the demo model's held-out text with every
// setting that touches a request's sampling state, a run of them through an engine, and the
// bit-for-bit comparison of two runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "demo_model_golden.h"
#include "engine/engine.h"

namespace peregrine::testing {

struct CollectedRequest {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
};

struct EngineOutcome {
  std::vector<CollectedRequest> out;
  EngineStats stats;
};

// Real text (the demo model's held-out rows), greedy and sampled: top-p, a seeded
// temperature-1 draw with a frequency penalty and min_tokens, repetition penalty with a stop
// token, logprobs.
inline std::vector<EngineRequest> SpeculativeRequests() {
  auto golden = ReadDemoGolden();
  EXPECT_TRUE(golden.ok()) << golden.status().ToString();
  if (!golden.ok()) return {};
  std::vector<EngineRequest> out;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    r.id = "s";
    r.id += std::to_string(i);
    const std::vector<int32_t>& text = i % 2 == 0 ? golden->mtp_tokens : golden->prompt_ids;
    const size_t len = std::min<size_t>(text.size(), 20 + 23 * static_cast<size_t>(i));
    r.prompt_ids.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(len));
    r.max_tokens = 40 + 9 * (i % 3);
    r.ignore_eos = i != 3;
    r.sampling.logprobs = i % 4 == 0 ? 3 : -1;
    r.sampling.temperature = 0.0f;
    switch (i % 4) {
      case 1:
        r.sampling.temperature = 0.8f;
        r.sampling.top_p = 0.9f;
        r.sampling.seed = 1000 + static_cast<uint64_t>(i);
        break;
      case 2:
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 77;
        r.sampling.frequency_penalty = 0.4f;
        r.sampling.min_tokens = 12;
        break;
      case 3:
        r.sampling.repetition_penalty = 1.3f;
        r.stop_token_ids = {text[len / 2]};
        break;
      default:
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Submits `requests` to `engine` and steps it to the end; with `wave` > 0 the first `wave`
// requests finish before the rest are submitted.
inline EngineOutcome ServeToEnd(Engine& engine, const std::vector<EngineRequest>& requests, size_t wave = 0) {
  EngineOutcome result;
  result.out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == wave && wave > 0) {
      for (int step = 0; step < 100000 && engine.Step(); ++step) {
      }
    }
    Status s = engine.Submit(requests[i], [&result, i](const EngineEvent& ev) {
      CollectedRequest& c = result.out[i];
      c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const SampleResult& x : ev.samples) c.logprobs.push_back(x.logprob);
      if (ev.finish) c.finish = ev.finish;
      c.error += ev.error;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (int step = 0; step < 100000 && engine.Step(); ++step) {
  }
  result.stats = engine.Stats();
  return result;
}

// Every request finished the same way with the same tokens and logprobs.
inline void ExpectIdenticalOutcomes(const EngineOutcome& got, const EngineOutcome& want, const std::string& what) {
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_TRUE(want.out[i].finish.has_value()) << i << " " << want.out[i].error;
    EXPECT_EQ(got.out[i].finish, want.out[i].finish) << what << ", request " << i << ": " << got.out[i].error;
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << what << ", request " << i;
    EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs) << what << ", request " << i;
  }
}

// Mean accepted draft tokens per verify step.
inline double MeanAccepted(const EngineStats& s) {
  return s.spec_num_drafts > 0 ? static_cast<double>(s.spec_num_accepted_tokens) / static_cast<double>(s.spec_num_drafts)
                               : 0.0;
}

}  // namespace peregrine::testing
