// The trained demo model (models/deepseek-v4-demo, the embedded model of `peregrine serve`) on
// the CPU backend against HF transformers' float32 run of the same checkpoint
// (tests/model/demo_model_golden.json): 64 greedy tokens identical, each step's largest
// logits and log-sum-exp within 1e-4 relative, and teacher-forced rows with the same argmax
// and next-token logprobs at every position, and the MTP layer's logits (token t + 2) on the
// greedy sequence. Unlike the random fixtures, the trained router
// and indexer make real, well-separated choices here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "demo_model_golden.h"
#include "model/deepseek_v4/model.h"
#include "sampling/sampler.h"

namespace peregrine::deepseek_v4 {
namespace {

constexpr double kTolerance = 1e-4;

double LogSumExp(std::span<const float> x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0.0;
  for (float v : x) s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

class DemoModelParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto golden = testing::ReadDemoGolden();
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    golden_ = std::move(golden).value();
    auto model = Model::Load(testing::DemoModelDir(), /*num_threads=*/2);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    vocab_ = static_cast<size_t>(model_->config().vocab_size);
  }

  testing::DemoGolden golden_;
  std::unique_ptr<Model> model_;
  size_t vocab_ = 0;
};

TEST_F(DemoModelParityTest, GreedyDecodingMatchesTransformers) {
  SequenceState state = model_->NewSequence();
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(state, golden_.prompt_ids, /*all_logits=*/false, &logits).ok());
  double worst = 0.0;
  for (size_t step = 0; step < golden_.greedy.size(); ++step) {
    const testing::DemoGreedyStep& want = golden_.greedy[step];
    ASSERT_EQ(logits.size(), vocab_);
    const auto token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(token, want.token) << "step " << step;
    double scale = 0.0, err = 0.0;
    for (size_t k = 0; k < want.top_ids.size(); ++k) {
      scale = std::max(scale, std::abs(want.top_logits[k]));
      err = std::max(err, std::abs(logits[static_cast<size_t>(want.top_ids[k])] - want.top_logits[k]));
    }
    worst = std::max(worst, err / scale);
    EXPECT_LE(err / scale, kTolerance) << "step " << step;
    EXPECT_NEAR(LogSumExp(logits), want.lse, kTolerance * std::abs(want.lse)) << "step " << step;
    const int32_t next[] = {token};
    ASSERT_TRUE(model_->Forward(state, next, /*all_logits=*/false, &logits).ok());
  }
  std::printf("demo model: %zu greedy tokens identical to transformers, worst top-32 logit error %.2e relative\n",
              golden_.greedy.size(), worst);
}

TEST_F(DemoModelParityTest, TeacherForcedRowsMatchTransformers) {
  size_t positions = 0;
  double worst = 0.0;
  for (size_t r = 0; r < golden_.rows.size(); ++r) {
    const std::vector<int32_t>& row = golden_.rows[r];
    SequenceState state = model_->NewSequence();
    std::vector<float> logits;
    ASSERT_TRUE(model_->Forward(state, row, /*all_logits=*/true, &logits).ok());
    ASSERT_EQ(logits.size(), row.size() * vocab_);
    for (size_t p = 0; p + 1 < row.size(); ++p) {
      const std::span<const float> x(logits.data() + p * vocab_, vocab_);
      const SampleResult s = ScoreToken(x, row[p + 1], 1);
      ASSERT_EQ(s.top_logprobs.front().token, golden_.argmax[r][p]) << "row " << r << " position " << p;
      const double want = golden_.target_logprob[r][p];
      worst = std::max(worst, std::abs(s.logprob - want) / std::max(1.0, std::abs(want)));
      EXPECT_NEAR(s.logprob, want, kTolerance * std::max(1.0, std::abs(want))) << "row " << r << " position " << p;
      ++positions;
    }
  }
  std::printf("demo model: %zu teacher-forced positions, same argmax, worst logprob error %.2e\n", positions, worst);
}

TEST_F(DemoModelParityTest, MtpLayerMatchesTheReferenceBlock) {
  ASSERT_TRUE(model_->has_mtp());
  std::vector<float> logits;
  ASSERT_TRUE(model_->MtpLogits(golden_.mtp_tokens, &logits).ok());
  const size_t n = golden_.mtp_tokens.size() - 1;
  ASSERT_EQ(logits.size(), n * vocab_);
  ASSERT_EQ(golden_.mtp_argmax.size(), n);
  double worst = 0.0;
  for (size_t t = 0; t < n; ++t) {
    const std::span<const float> x(logits.data() + t * vocab_, vocab_);
    EXPECT_EQ(std::max_element(x.begin(), x.end()) - x.begin(), golden_.mtp_argmax[t]) << "position " << t;
    double scale = 0.0, err = 0.0;
    for (size_t k = 0; k < golden_.mtp_top_ids[t].size(); ++k) {
      scale = std::max(scale, std::abs(golden_.mtp_top_logits[t][k]));
      err = std::max(err, std::abs(x[static_cast<size_t>(golden_.mtp_top_ids[t][k])] - golden_.mtp_top_logits[t][k]));
    }
    worst = std::max(worst, err / scale);
    EXPECT_LE(err / scale, kTolerance) << "position " << t;
    EXPECT_NEAR(LogSumExp(x), golden_.mtp_lse[t], kTolerance * std::abs(golden_.mtp_lse[t])) << "position " << t;
  }
  std::printf("demo model MTP layer: %zu positions, same argmax, worst top-8 logit error %.2e relative\n", n, worst);
  const int32_t one[] = {5};
  EXPECT_EQ(model_->MtpLogits(one, &logits).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::deepseek_v4
