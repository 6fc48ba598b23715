// The drafter's candidates kernel vs the host's raw logprobs (sampling/raw_logprobs.h, the CPU
// drafter's candidates) on the same rows: the K tokens identical and in the same order (larger
// logit, then lower id; NaN as -inf), their log-probabilities within 1e-5 relative (+2e-5), the
// first token in `tokens`, only the K requested columns written. Shapes: the V4 vocabulary
// and odd ones (a row shorter than a CTA's part, shorter than K), batches that use one CTA per
// row and clusters, peaked, flat, tied and NaN/-inf rows, a fully -inf row, rows holding +inf,
// a graph replay.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/ops/sampling.h"
#include "gpu_test_util.h"
#include "kernels/draft_candidates.cuh"
#include "sampling/raw_logprobs.h"

namespace peregrine::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Row(int kind, int64_t vocab, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-3, 3);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  for (float& v : x) {
    switch (kind % 6) {
      case 0: v = 3.0f * normal(rng); break;                        // peaked (spikes below)
      case 1: v = 0.01f * normal(rng); break;                       // flat
      case 2: v = 0.5f * static_cast<float>(small(rng)); break;     // ties everywhere
      case 3: v = 2.0f * normal(rng); break;                        // NaN and -inf sprinkled
      case 4: v = -kInf; break;                                     // nothing finite
      case 5: v = 2.0f * normal(rng); break;                        // +inf twice (below)
    }
  }
  if (kind % 6 == 5) {
    // The host's normalizer is +inf: every log-probability is -inf, the +inf tokens first.
    x[static_cast<size_t>(pick(rng))] = kInf;
    x[static_cast<size_t>(pick(rng))] = kInf;
  }
  if (kind % 6 == 0)
    for (int i = 0; i < 4; ++i) x[static_cast<size_t>(pick(rng))] += 10.0f + static_cast<float>(i);
  if (kind % 6 == 3) {
    for (int64_t i = 0; i < std::max<int64_t>(1, vocab / 8); ++i)
      x[static_cast<size_t>(pick(rng))] = (i % 2 == 0) ? -kInf : std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

class DraftCandidatesTest : public GpuTest {
 protected:
  // Runs the op on `rows` (B rows of V) with K candidates written at `column` of W-wide
  // outputs (W = 0: the most likely token alone, as a chain drafts), optionally through a
  // captured graph, and checks everything against the host.
  void Check(const std::vector<std::vector<float>>& rows, int64_t vocab, int k, int64_t width, int64_t column,
             bool graph, const std::string& what, bool one_cta_per_row = false,
             const std::vector<std::vector<float>>* bias = nullptr) {
    const auto batch = static_cast<int64_t>(rows.size());
    std::vector<float> all, all_bias;
    for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
    if (bias != nullptr)
      for (const auto& r : *bias) all_bias.insert(all_bias.end(), r.begin(), r.end());
    cuda::DeviceBuffer logits = Upload(all);
    cuda::DeviceBuffer bias_d = bias != nullptr ? Upload(all_bias) : cuda::DeviceBuffer{};
    cuda::DeviceBuffer tokens = Poisoned(static_cast<size_t>(batch) * 4);
    cuda::DeviceBuffer top_tokens = Poisoned(static_cast<size_t>(std::max<int64_t>(batch * width, 1)) * 4, 0x7f);
    cuda::DeviceBuffer top_logprobs = Poisoned(static_cast<size_t>(std::max<int64_t>(batch * width, 1)) * 4, 0x7f);
    cuda::DraftCandidatesArgs a;
    a.logits = View(logits, DType::kF32, {batch, vocab});
    if (bias != nullptr) a.bias = View(bias_d, DType::kF32, {batch, vocab});
    a.tokens = View(tokens, DType::kI32, {batch});
    if (width > 0) {
      a.top_tokens = View(top_tokens, DType::kI32, {batch, width});
      a.top_logprobs = View(top_logprobs, DType::kF32, {batch, width});
    }
    a.column = column;
    a.k = k;
    a.one_cta_per_row = one_cta_per_row;
    if (graph) {
      PG_ASSERT_OK(cuda::Graph::BeginCapture(stream_.get()));
      const Status launched = cuda::DraftCandidates(a, stream_.get());
      Result<cuda::Graph> g = cuda::Graph::EndCapture(stream_.get());
      PG_ASSERT_OK(launched);
      PG_ASSERT_OK(g.status());
      PG_ASSERT_OK(g.value().Launch(stream_.get()));
    } else {
      PG_ASSERT_OK(cuda::DraftCandidates(a, stream_.get()));
    }
    Sync();
    const std::vector<int32_t> got_first = Download<int32_t>(tokens, static_cast<size_t>(batch));
    const std::vector<int32_t> got_tokens = Download<int32_t>(top_tokens, static_cast<size_t>(batch * width));
    const std::vector<float> got_logprobs = Download<float>(top_logprobs, static_cast<size_t>(batch * width));
    int32_t untouched = 0;
    std::memset(&untouched, 0x7f, 4);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<float> host = rows[static_cast<size_t>(b)];
      if (bias != nullptr)
        for (size_t v = 0; v < host.size(); ++v) host[v] += (*bias)[static_cast<size_t>(b)][v];
      const RawLogprobs want = ComputeRawLogprobs(host, k);
      const std::string row = what + ", row " + std::to_string(b);
      ASSERT_FALSE(want.top.empty()) << row;
      EXPECT_EQ(got_first[static_cast<size_t>(b)], want.top[0].token) << row;
      for (int64_t c = 0; c < width; ++c) {
        const auto at = static_cast<size_t>(b * width + c);
        const int64_t i = c - column;
        if (i < 0 || i >= k) {
          EXPECT_EQ(got_tokens[at], untouched) << row << ": column " << c << " written";
          continue;
        }
        if (i >= static_cast<int64_t>(want.top.size())) {
          EXPECT_EQ(got_tokens[at], -1) << row << ", candidate " << i;
          EXPECT_EQ(got_logprobs[at], -kInf) << row << ", candidate " << i;
          continue;
        }
        const TokenLogprob& w = want.top[static_cast<size_t>(i)];
        EXPECT_EQ(got_tokens[at], w.token) << row << ", candidate " << i;
        if (std::isinf(w.logprob)) {
          EXPECT_EQ(got_logprobs[at], w.logprob) << row << ", candidate " << i;
        } else {
          EXPECT_NEAR(got_logprobs[at], w.logprob, 2e-5 + 1e-5 * std::fabs(w.logprob)) << row << ", candidate " << i;
        }
      }
    }
  }
};

TEST_F(DraftCandidatesTest, MatchesTheHostsRawLogprobs) {
  std::mt19937 rng(5);
  struct Shape {
    int64_t vocab;
    int64_t batch;
  };
  for (const Shape& s : {Shape{129280, 1}, Shape{129280, 5}, Shape{129280, 16}, Shape{129280, 40}, Shape{4099, 3},
                         Shape{1000, 7}, Shape{37, 4}, Shape{5, 2}}) {
    // Every list length the kernel is built with (1, 4, 8, 16), full and part used.
    for (int k : {1, 3, 4, 5, 8, 12, 16}) {
      std::vector<std::vector<float>> rows;
      for (int64_t b = 0; b < s.batch; ++b) rows.push_back(Row(static_cast<int>(b), s.vocab, rng));
      const std::string what = "V=" + std::to_string(s.vocab) + " B=" + std::to_string(s.batch) + " K=" + std::to_string(k);
      // Columns [3k, 4k) of rows 5k wide: the drafter's [depths, K] layout at depth 3; both
      // forms (a cluster per row on sm_90, one CTA per row elsewhere).
      Check(rows, s.vocab, k, 5 * k, 3 * k, false, what);
      if (HasFatalFailure()) return;
      Check(rows, s.vocab, k, 5 * k, 3 * k, false, what + ", one CTA per row", true);
      if (HasFatalFailure()) return;
    }
    // The chain's call: K = 1 and no log-probabilities (the kernel skips the row's sum).
    std::vector<std::vector<float>> rows;
    for (int64_t b = 0; b < s.batch; ++b) rows.push_back(Row(static_cast<int>(b), s.vocab, rng));
    const std::string what = "V=" + std::to_string(s.vocab) + " B=" + std::to_string(s.batch) + " tokens only";
    Check(rows, s.vocab, 1, 0, 0, false, what);
    if (HasFatalFailure()) return;
    Check(rows, s.vocab, 1, 0, 0, false, what + ", one CTA per row", true);
    if (HasFatalFailure()) return;
  }
}

// The block drafter's call: a bias row (its Markov term) added to each logits row first; the
// candidates and log-probabilities are those of the sums.
TEST_F(DraftCandidatesTest, AddsTheBiasFirst) {
  std::mt19937 rng(7);
  for (const auto& [vocab, batch] : {std::pair<int64_t, int64_t>{129280, 3}, {1000, 5}, {37, 2}}) {
    std::vector<std::vector<float>> rows, bias;
    for (int64_t b = 0; b < batch; ++b) {
      rows.push_back(Row(static_cast<int>(b), vocab, rng));
      // Large enough to reorder the row's leaders.
      bias.push_back(Row(static_cast<int>(b) + 1, vocab, rng));
    }
    for (int k : {1, 4}) {
      const std::string what = "bias, V=" + std::to_string(vocab) + " B=" + std::to_string(batch) + " K=" + std::to_string(k);
      Check(rows, vocab, k, 2 * k, k, false, what, false, &bias);
      if (HasFatalFailure()) return;
      Check(rows, vocab, k, 2 * k, k, false, what + ", one CTA per row", true, &bias);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(DraftCandidatesTest, GraphReplay) {
  std::mt19937 rng(9);
  std::vector<std::vector<float>> rows;
  for (int b = 0; b < 4; ++b) rows.push_back(Row(b, 129280, rng));
  Check(rows, 129280, 4, 12, 4, true, "graph");
}

TEST_F(DraftCandidatesTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::DraftCandidatesArgs a;
  a.logits = View(buf, DType::kF32, {2, 100});
  a.tokens = View(buf, DType::kI32, {2});
  a.top_tokens = View(buf, DType::kI32, {2, 8});
  a.top_logprobs = View(buf, DType::kF32, {2, 8});
  a.k = 4;
  a.column = 4;
  PG_ASSERT_OK(cuda::DraftCandidates(a, stream_.get()));
  cuda::DraftCandidatesArgs bad = a;
  bad.column = 5;  // past W
  EXPECT_EQ(cuda::DraftCandidates(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.k = 17;
  EXPECT_EQ(cuda::DraftCandidates(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.k = 0;
  EXPECT_EQ(cuda::DraftCandidates(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.top_logprobs = Tensor{};  // one of the pair
  EXPECT_EQ(cuda::DraftCandidates(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.logits = View(buf, DType::kBF16, {2, 100});
  EXPECT_EQ(cuda::DraftCandidates(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.tokens = View(buf, DType::kI32, {3});
  EXPECT_EQ(cuda::DraftCandidates(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  Sync();
}

}  // namespace
}  // namespace peregrine::testing
