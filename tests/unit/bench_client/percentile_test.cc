// Percentile math against hand-computed values, and the run metrics built on it.
#include "bench_client/percentile.h"

#include <gtest/gtest.h>

#include "bench_client/run_metrics.h"

namespace peregrine::bench_client {
namespace {

TEST(PercentileTest, InterpolatesBetweenRanks) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);    // rank 1.5
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 3.7);    // rank 2.7
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);   // rank 2.97
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4.0);
  const std::vector<double> w = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(Percentile(w, 50), 30.0);   // rank 2 exactly
  EXPECT_DOUBLE_EQ(Percentile(w, 90), 46.0);   // rank 3.6
  EXPECT_DOUBLE_EQ(Percentile(w, 25), 20.0);   // rank 1
  EXPECT_DOUBLE_EQ(Percentile(w, 99), 49.6);   // rank 3.96
}

TEST(PercentileTest, SingleSampleIsEveryPercentile) {
  const std::vector<double> v = {7.5};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 7.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 7.5);
}

TEST(PercentileTest, SummarizeSortsAndAverages) {
  const Distribution d = Summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(d.num_samples, 5);
  EXPECT_DOUBLE_EQ(d.mean, 3.0);
  EXPECT_DOUBLE_EQ(d.p50, 3.0);
  EXPECT_DOUBLE_EQ(d.p90, 4.6);   // rank 3.6 of 1..5
  EXPECT_DOUBLE_EQ(d.p99, 4.96);
  const Distribution empty = Summarize({});
  EXPECT_EQ(empty.num_samples, 0);
  EXPECT_EQ(empty.mean, 0);
}

RequestRecord MakeRecord(Clock::time_point t0, std::vector<int> token_ms, int end_ms, int64_t num_tokens) {
  RequestRecord r;
  r.send_time = t0;
  for (int ms : token_ms) r.token_times.push_back(t0 + std::chrono::milliseconds(ms));
  r.end_time = t0 + std::chrono::milliseconds(end_ms);
  r.num_output_tokens = num_tokens;
  r.is_success = true;
  r.http_status = 200;
  return r;
}

TEST(RunMetricsTest, HandComputedRun) {
  const Clock::time_point t0{};
  std::vector<RequestRecord> records;
  // TTFT 100, ITLs 10 and 30, e2e 150, 3 tokens: TPOT (150 - 100) / 2 = 25.
  records.push_back(MakeRecord(t0, {100, 110, 140}, 150, 3));
  records.back().num_prompt_tokens = 20;
  // TTFT 200, one chunk carrying 4 tokens, e2e 260: TPOT (260 - 200) / 3 = 20, no ITL.
  records.push_back(MakeRecord(t0, {200}, 260, 4));
  records.push_back(MakeRecord(t0, {}, 50, 0));
  records.back().is_success = false;
  records.back().http_status = 500;
  records.back().error = "HTTP 500: x";
  std::vector<PromptSpec> prompts(3);
  prompts[1].input_len = 7;  // no usage for record 1: the planned length counts

  const RunMetrics m = ComputeRunMetrics(records, prompts, /*duration_s=*/2.0);
  EXPECT_EQ(m.num_completed, 2);
  EXPECT_EQ(m.num_failed, 1);
  EXPECT_EQ(m.total_input_tokens, 27);
  EXPECT_TRUE(m.is_input_estimated);
  EXPECT_EQ(m.total_output_tokens, 7);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 17.0);
  EXPECT_DOUBLE_EQ(m.mean_tokens_per_chunk, 7.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 150.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 150.0);
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, 22.5);
  EXPECT_EQ(m.itl_ms.num_samples, 2);
  EXPECT_DOUBLE_EQ(m.itl_ms.mean, 20.0);
  EXPECT_DOUBLE_EQ(m.itl_ms.p90, 28.0);  // rank 0.9 between 10 and 30
  EXPECT_DOUBLE_EQ(m.e2el_ms.mean, 205.0);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0].error, "HTTP 500: x");
  EXPECT_EQ(m.errors[0].num_requests, 1);
}

TEST(RunMetricsTest, NothingCompleted) {
  std::vector<RequestRecord> records(2);
  records[0].error = "connect: refused";
  records[1].error = "connect: refused";
  const std::vector<PromptSpec> prompts(2);
  const RunMetrics m = ComputeRunMetrics(records, prompts, 1.0);
  EXPECT_EQ(m.num_completed, 0);
  EXPECT_EQ(m.num_failed, 2);
  EXPECT_EQ(m.ttft_ms.num_samples, 0);
  EXPECT_EQ(m.request_throughput, 0);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0].num_requests, 2);
}

}  // namespace
}  // namespace peregrine::bench_client
