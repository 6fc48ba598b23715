// Seeded prompts and lengths, and the Poisson arrival schedule.
#include "bench_client/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench_client/bench_config.h"

namespace peregrine::bench_client {
namespace {

int CountWords(const std::string& s) {
  int n = s.empty() ? 0 : 1;
  for (char c : s) n += c == ' ';
  return n;
}

TEST(WorkloadTest, FixedLengthsWhenRangeIsZero) {
  auto prompts = MakeRandomWorkload({.num_prompts = 20, .input_len = 33, .output_len = 5, .range_ratio = 0, .seed = 1});
  ASSERT_TRUE(prompts.ok());
  ASSERT_EQ(prompts->size(), 20u);
  for (const PromptSpec& p : *prompts) {
    EXPECT_EQ(p.input_len, 33);
    EXPECT_EQ(CountWords(p.prompt), 33);
    EXPECT_EQ(p.output_len, 5);
  }
  EXPECT_NE((*prompts)[0].prompt, (*prompts)[1].prompt);
}

TEST(WorkloadTest, RandomLengthsStayInRangeAndRepeatWithTheSeed) {
  const WorkloadOptions options{.num_prompts = 500, .input_len = 100, .output_len = 40, .range_ratio = 0.5, .seed = 7};
  auto a = MakeRandomWorkload(options);
  auto b = MakeRandomWorkload(options);
  ASSERT_TRUE(a.ok() && b.ok());
  int min_in = 1 << 30, max_in = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    const PromptSpec& p = (*a)[i];
    EXPECT_EQ(p.prompt, (*b)[i].prompt);
    EXPECT_GE(p.input_len, 50);
    EXPECT_LE(p.input_len, 150);
    EXPECT_GE(p.output_len, 20);
    EXPECT_LE(p.output_len, 60);
    EXPECT_EQ(CountWords(p.prompt), p.input_len);
    min_in = std::min(min_in, p.input_len);
    max_in = std::max(max_in, p.input_len);
  }
  EXPECT_LT(min_in, 60);  // the range is actually used
  EXPECT_GT(max_in, 140);
  auto other = MakeRandomWorkload({.num_prompts = 1, .input_len = 100, .output_len = 40, .range_ratio = 0.5, .seed = 8});
  EXPECT_NE((*other)[0].prompt, (*a)[0].prompt);
}

TEST(WorkloadTest, SharedPrefixThenOwnWords) {
  auto prompts = MakeRandomWorkload(
      {.num_prompts = 30, .input_len = 12, .output_len = 5, .range_ratio = 0, .prefix_len = 200, .seed = 3});
  ASSERT_TRUE(prompts.ok());
  const std::string& first = (*prompts)[0].prompt;
  const size_t prefix_chars = [&] {
    size_t at = 0;
    for (int w = 0; w < 200; ++w) at = first.find(' ', at) + 1;
    return at;
  }();
  for (const PromptSpec& p : *prompts) {
    EXPECT_EQ(p.input_len, 212);
    EXPECT_EQ(CountWords(p.prompt), 212);
    EXPECT_EQ(p.prompt.compare(0, prefix_chars, first, 0, prefix_chars), 0);
  }
  EXPECT_NE((*prompts)[0].prompt.substr(prefix_chars), (*prompts)[1].prompt.substr(prefix_chars));
  EXPECT_FALSE(MakeRandomWorkload({.num_prompts = 1, .prefix_len = -1}).ok());
}

TEST(WorkloadTest, RejectsBadOptions) {
  EXPECT_FALSE(MakeRandomWorkload({.num_prompts = 0}).ok());
  EXPECT_FALSE(MakeRandomWorkload({.num_prompts = 1, .input_len = 0}).ok());
  EXPECT_FALSE(MakeRandomWorkload({.num_prompts = 1, .range_ratio = 1.0}).ok());
  EXPECT_FALSE(MakeRandomWorkload({.num_prompts = 1, .range_ratio = -0.1}).ok());
}

TEST(PoissonTest, DeterministicForASeed) {
  const auto a = PoissonArrivalOffsets(50, 10.0, 42);
  const auto b = PoissonArrivalOffsets(50, 10.0, 42);
  const auto c = PoissonArrivalOffsets(50, 10.0, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a[0], 0.0);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GT(a[i], a[i - 1]);
}

TEST(PoissonTest, MeanGapIsOneOverRate) {
  constexpr int kN = 200'001;
  constexpr double kRate = 4.0;
  const auto offsets = PoissonArrivalOffsets(kN, kRate, 123);
  const double mean_gap = offsets.back() / (kN - 1);
  EXPECT_NEAR(mean_gap, 1.0 / kRate, 0.01 / kRate);  // 1%; the standard error is ~0.22%
  // Exponential gaps: about e^-1 of them exceed the mean.
  int num_long = 0;
  for (size_t i = 1; i < offsets.size(); ++i) num_long += offsets[i] - offsets[i - 1] > 1.0 / kRate;
  EXPECT_NEAR(num_long / double(kN - 1), std::exp(-1.0), 0.01);
}

TEST(PoissonTest, InfiniteRateSendsAllAtOnce) {
  const auto offsets = PoissonArrivalOffsets(5, std::numeric_limits<double>::infinity(), 1);
  EXPECT_EQ(offsets, std::vector<double>(5, 0.0));
}

TEST(BenchConfigTest, RequestRates) {
  EXPECT_TRUE(std::isinf(*ParseRequestRate("inf")));
  EXPECT_DOUBLE_EQ(*ParseRequestRate("2.5"), 2.5);
  EXPECT_FALSE(ParseRequestRate("0").ok());
  EXPECT_FALSE(ParseRequestRate("-1").ok());
  EXPECT_FALSE(ParseRequestRate("fast").ok());
  EXPECT_FALSE(ParseRequestRate("").ok());
  BenchConfig config;
  config.concurrencies = {1};
  config.request_rates = {1.0};
  EXPECT_EQ(ValidateBenchConfig(config).code(), StatusCode::kInvalidArgument);
  config.request_rates.clear();
  EXPECT_TRUE(ValidateBenchConfig(config).ok());
  config.endpoint = "v1/completions";
  EXPECT_FALSE(ValidateBenchConfig(config).ok());
  config.endpoint = "/v1/completions";
  config.extra_body = R"({"guided_regex": "[0-9]+"})";
  EXPECT_TRUE(ValidateBenchConfig(config).ok());
  for (const char* bad : {"[1, 2]", "{not json", "3"}) {
    config.extra_body = bad;
    EXPECT_EQ(ValidateBenchConfig(config).code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace peregrine::bench_client
