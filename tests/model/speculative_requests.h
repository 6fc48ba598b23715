// What the engine tests over the demo model share (speculative_engine_test on the CPU
// backend, cuda_speculative_test on the GPU, disaggregated_engine_test): requests over the
// demo model's held-out text with every setting that touches a request's sampling state, the
// collection of a request's events, a run through an engine, and the bit-for-bit comparison
// of two runs; sampled requests and a two-sample test of their tokens' distribution.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "demo_model_golden.h"
#include "engine/engine.h"
#include "speculative/speculative_config.h"

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

// Request i's sampling settings (of a set of demo requests whose prompt is text[0, len)):
// greedy with logprobs, seeded top-p, a seeded temperature-1 draw with a frequency penalty and
// min_tokens, greedy with a repetition penalty and a stop token taken from the prompt (and
// end-of-sequence honoured for i == 3), by i % 4.
inline void SetDemoSampling(int i, const std::vector<int32_t>& text, size_t len, EngineRequest* request) {
  EngineRequest& r = *request;
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
}

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
    SetDemoSampling(i, text, len, &r);
    out.push_back(std::move(r));
  }
  return out;
}

// An engine event sink appending to `c` (which outlives the request).
inline EventSink CollectInto(CollectedRequest* c) {
  return [c](const EngineEvent& ev) {
    c->tokens.insert(c->tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const SampleResult& x : ev.samples) c->logprobs.push_back(x.logprob);
    if (ev.finish) c->finish = ev.finish;
    c->error += ev.error;
  };
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
    Status s = engine.Submit(requests[i], CollectInto(&result.out[i]));
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (int step = 0; step < 100000 && engine.Step(); ++step) {
  }
  result.stats = engine.Stats();
  return result;
}

// Every request finished the same way with the same tokens and logprobs.
inline void ExpectIdenticalRequests(const std::vector<CollectedRequest>& got, const std::vector<CollectedRequest>& want,
                                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(want[i].finish.has_value()) << i << " " << want[i].error;
    EXPECT_EQ(got[i].finish, want[i].finish) << what << ", request " << i << ": " << got[i].error;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ", request " << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << what << ", request " << i;
  }
}
inline void ExpectIdenticalOutcomes(const EngineOutcome& got, const EngineOutcome& want, const std::string& what) {
  ExpectIdenticalRequests(got.out, want.out, what);
}

// Mean accepted draft tokens per verify step.
inline double MeanAccepted(const EngineStats& s) {
  return s.spec_num_drafts > 0 ? static_cast<double>(s.spec_num_accepted_tokens) / static_cast<double>(s.spec_num_drafts)
                               : 0.0;
}

// Sampled tokens as a distribution: n requests over 24 tokens of held-out text, each drawing
// 5 tokens at `temperature` with seed first_seed + i.
inline std::vector<EngineRequest> SampledRequests(uint64_t first_seed, int n, float temperature) {
  auto golden = ReadDemoGolden();
  EXPECT_TRUE(golden.ok()) << golden.status().ToString();
  if (!golden.ok()) return {};
  const std::vector<int32_t>& text = golden->mtp_tokens;  // 83 tokens
  std::vector<EngineRequest> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EngineRequest& r = out[static_cast<size_t>(i)];
    r.id = "d" + std::to_string(i);
    r.prompt_ids.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(text.size(), 24)));
    r.max_tokens = 5;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.seed = first_seed + static_cast<uint64_t>(i);
  }
  return out;
}

// Every request of a SampledRequests run finished with all of its tokens.
inline void ExpectWholeSampled(const EngineOutcome& run, int requests, const std::string& what) {
  ASSERT_EQ(run.out.size(), static_cast<size_t>(requests)) << what;
  for (const CollectedRequest& r : run.out) ASSERT_EQ(r.tokens.size(), 5u) << what << ": " << r.error;
}

// P(X >= chi2) for X chi-square with df degrees of freedom (Wilson-Hilferty; ample for a
// 1e-4 threshold).
inline double ChiSquareUpperTail(double chi2, int df) {
  if (df <= 0) return 1.0;
  const double k = df, v = 2.0 / (9.0 * k);
  const double z = (std::cbrt(chi2 / k) - (1.0 - v)) / std::sqrt(v);
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// The p-value of a two-sample chi-square test that generated position `pos` has one
// distribution in the equal-sized runs `a` and `b` (tokens seen fewer than 10 times pooled).
inline double SamePositionP(const EngineOutcome& a, const EngineOutcome& b, size_t pos) {
  std::map<int32_t, std::pair<int, int>> counts;
  for (const CollectedRequest& r : a.out)
    if (pos < r.tokens.size()) ++counts[r.tokens[pos]].first;
  for (const CollectedRequest& r : b.out)
    if (pos < r.tokens.size()) ++counts[r.tokens[pos]].second;
  std::vector<std::pair<int, int>> bins;
  std::pair<int, int> pooled{0, 0};
  for (const auto& [token, c] : counts) {
    if (c.first + c.second >= 10) {
      bins.push_back(c);
    } else {
      pooled.first += c.first;
      pooled.second += c.second;
    }
  }
  if (pooled.first + pooled.second > 0) bins.push_back(pooled);
  double chi2 = 0.0;
  for (const auto& [x, y] : bins) chi2 += static_cast<double>((x - y) * (x - y)) / static_cast<double>(x + y);
  return ChiSquareUpperTail(chi2, static_cast<int>(bins.size()) - 1);
}

// The distribution test: `serve(spec, requests)` runs requests to the end with speculation
// `spec` (default: none). 200 seeded temperature-1 requests with each drafter and 200 of
// other seeds without one must pass SamePositionP at every generated position (p > 1e-4);
// temperature 0.6 against 1 must not (the test can fail). `label` prefixes the printed p.
using ServeFn =
    std::function<EngineOutcome(const speculative::SpeculativeConfig&, const std::vector<EngineRequest>&)>;
inline void ExpectSampledDistributionKept(
    const ServeFn& serve, const std::vector<std::pair<std::string, speculative::SpeculativeConfig>>& drafters,
    const std::string& label) {
  constexpr int kRequests = 200;
  constexpr double kReject = 1e-4;
  const EngineOutcome want = serve({}, SampledRequests(1, kRequests, 1.0f));
  ExpectWholeSampled(want, kRequests, "plain");
  if (::testing::Test::HasFatalFailure()) return;
  for (const auto& [name, spec] : drafters) {
    const EngineOutcome got = serve(spec, SampledRequests(1000001, kRequests, 1.0f));
    ExpectWholeSampled(got, kRequests, name);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_GT(got.stats.spec_num_accepted_tokens, 0) << name;
    for (size_t pos = 0; pos < 5; ++pos) {
      const double p = SamePositionP(got, want, pos);
      EXPECT_GT(p, kReject) << name << ", generated position " << pos;
      std::printf("%s%s, position %zu: p = %.3g\n", label.c_str(), name.c_str(), pos, p);
    }
  }
  const EngineOutcome colder = serve({}, SampledRequests(2000001, kRequests, 0.6f));
  ExpectWholeSampled(colder, kRequests, "temperature 0.6");
  if (::testing::Test::HasFatalFailure()) return;
  double smallest = 1.0;
  for (size_t pos = 0; pos < 5; ++pos) smallest = std::min(smallest, SamePositionP(colder, want, pos));
  EXPECT_LT(smallest, kReject) << "the test cannot tell temperature 0.6 from 1";
  std::printf("%stemperature 0.6 against 1: smallest p = %.3g\n", label.c_str(), smallest);
}

}  // namespace peregrine::testing
