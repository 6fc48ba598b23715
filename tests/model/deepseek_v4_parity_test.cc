// DeepSeek-V4 on the CPU backend against HF transformers goldens (tests/fixtures, made by
// tools/make_v4_fixtures.py from a float64 run of transformers' deepseek_v4).
#include <gtest/gtest.h>

#include <algorithm>
#include <span>

#include "golden.h"
#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4 {
namespace {

using testing::FixtureDirs;
using testing::Golden;
using testing::ReadGolden;
using testing::RelativeL2;

// fp32 engine vs float64 reference: rounding is ~1e-6 relative; 1e-4 is the acceptance bound.
constexpr double kLogitsTolerance = 1e-4;

class ParityTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  void SetUp() override {
    auto model = Model::Load(GetParam() / "model", /*num_threads=*/2);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    auto golden = ReadGolden(GetParam() / "golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    golden_ = std::move(golden).value();
    ASSERT_EQ(golden_.vocab, model_->config().vocab_size);
  }

  // Prefills the prompt in chunks of `chunk` tokens; returns logits [T, V].
  std::vector<float> Prefill(SequenceState& state, int64_t chunk) {
    std::vector<float> all, part;
    const std::span<const int32_t> prompt(golden_.prompt_ids);
    for (size_t begin = 0; begin < prompt.size(); begin += static_cast<size_t>(chunk)) {
      const size_t n = std::min(prompt.size() - begin, static_cast<size_t>(chunk));
      Status s = model_->Forward(state, prompt.subspan(begin, n), /*all_logits=*/true, &part);
      EXPECT_TRUE(s.ok()) << s.ToString();
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  }

  std::unique_ptr<Model> model_;
  Golden golden_;
};

TEST_P(ParityTest, FullForwardMatchesReference) {
  SequenceState state = model_->NewSequence();
  const std::vector<float> logits = Prefill(state, static_cast<int64_t>(golden_.prompt_ids.size()));
  ASSERT_EQ(logits.size(), golden_.full_logits.size());
  const double err = RelativeL2(logits.data(), golden_.full_logits.data(), static_cast<int64_t>(logits.size()));
  RecordProperty("full_forward_rel_l2", std::to_string(err));
  std::printf("%s full forward rel L2 %.3e\n", GetParam().filename().c_str(), err);
  EXPECT_LE(err, kLogitsTolerance);
}

TEST_P(ParityTest, ChunkedPrefillEqualsFullForward) {
  SequenceState full_state = model_->NewSequence();
  const std::vector<float> full = Prefill(full_state, static_cast<int64_t>(golden_.prompt_ids.size()));
  for (int64_t chunk : {1, 3, 7, 64}) {
    SequenceState state = model_->NewSequence();
    const std::vector<float> chunked = Prefill(state, chunk);
    ASSERT_EQ(chunked.size(), full.size());
    // Every op computes a token's row independently of the chunk, so this is exact.
    int64_t mismatches = 0;
    for (size_t i = 0; i < full.size(); ++i) mismatches += chunked[i] != full[i];
    EXPECT_EQ(mismatches, 0) << "chunk " << chunk;
    EXPECT_LE(RelativeL2(chunked.data(), golden_.full_logits.data(), static_cast<int64_t>(full.size())),
              kLogitsTolerance)
        << "chunk " << chunk;
  }
}

// Sequences sharing a batched forward do not affect each other: two copies of the prompt,
// split at different points and run side by side, give the full forward's logits exactly.
TEST_P(ParityTest, BatchedSequencesAreIndependent) {
  SequenceState full_state = model_->NewSequence();
  const std::vector<float> full = Prefill(full_state, static_cast<int64_t>(golden_.prompt_ids.size()));
  const std::span<const int32_t> prompt(golden_.prompt_ids);
  const size_t split_a = 150, split_b = 37;
  SequenceState a = model_->NewSequence(), b = model_->NewSequence();
  std::vector<float> first, second;
  const Model::Chunk step1[] = {{&a, prompt.first(split_a), true, true}, {&b, prompt.first(split_b), true, true}};
  ASSERT_TRUE(model_->Forward(step1, &first).ok());
  const Model::Chunk step2[] = {{&b, prompt.subspan(split_b), true, true}, {&a, prompt.subspan(split_a), true, true}};
  ASSERT_TRUE(model_->Forward(step2, &second).ok());
  const int64_t v = golden_.vocab;
  // Reassemble each sequence's rows: step1 = [a(150) | b(37)], step2 = [b(rest) | a(rest)].
  std::vector<float> got_a(first.begin(), first.begin() + static_cast<int64_t>(split_a) * v);
  got_a.insert(got_a.end(), second.begin() + static_cast<int64_t>(prompt.size() - split_b) * v, second.end());
  std::vector<float> got_b(first.begin() + static_cast<int64_t>(split_a) * v, first.end());
  got_b.insert(got_b.end(), second.begin(), second.begin() + static_cast<int64_t>(prompt.size() - split_b) * v);
  EXPECT_TRUE(got_a == full);
  EXPECT_TRUE(got_b == full);
}

// Greedy decoding after a prefill in chunks of 7: every token equals the reference's and
// every step's logits match within tolerance (crossing window and block boundaries).
TEST_P(ParityTest, GreedyDecodeMatchesReference) {
  SequenceState state = model_->NewSequence();
  std::vector<float> logits = Prefill(state, 7);
  const int64_t v = golden_.vocab;
  std::vector<float> last(logits.end() - v, logits.end());
  double worst = 0.0;
  for (size_t i = 0; i < golden_.generated_ids.size(); ++i) {
    const float* expected = golden_.step_logits.data() + static_cast<int64_t>(i) * v;
    const double err = RelativeL2(last.data(), expected, v);
    worst = std::max(worst, err);
    EXPECT_LE(err, kLogitsTolerance) << "step " << i;
    const int32_t token = static_cast<int32_t>(testing::ArgMax(last.data(), v));
    ASSERT_EQ(token, golden_.generated_ids[i]) << "step " << i;
    const int32_t next[] = {token};
    Status s = model_->Forward(state, next, /*all_logits=*/false, &last);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::printf("%s %zu greedy steps, worst step rel L2 %.3e\n", GetParam().filename().c_str(),
              golden_.generated_ids.size(), worst);
}

TEST_P(ParityTest, RejectsOutOfVocabTokens) {
  SequenceState state = model_->NewSequence();
  std::vector<float> logits;
  const int32_t bad[] = {1, static_cast<int32_t>(model_->config().vocab_size)};
  EXPECT_EQ(model_->Forward(state, bad, true, &logits).code(), StatusCode::kInvalidArgument);
  const int32_t negative[] = {-1};
  EXPECT_EQ(model_->Forward(state, negative, true, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state.num_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParityTest, ::testing::ValuesIn(FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine::deepseek_v4
