// AppendDeviceRow: the RNG is consumed exactly as Sample() consumes it, edits come out sorted by
// token in Sample()'s order and reproduce Sample()'s processed logits, and SampleOverflowRow
// returns what Sample() returns; AppendDeviceRowAfter gives the row of the state with a path
// appended without touching the state.
#include "sampling/device_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sampling/cdf_walk.h"
#include "sampling/logits_processors.h"
#include "sampling/weights.h"

namespace peregrine {
namespace {

// The device's edit arithmetic, on the host (the kernel spells the same operations).
float ApplyEdit(float v, const DeviceLogitEdit& e) {
  switch (static_cast<DeviceEditOp>(e.op)) {
    case DeviceEditOp::kAdd: return v + static_cast<float>(e.value);
    case DeviceEditOp::kRepetition: return v > 0.0f ? v / static_cast<float>(e.value) : v * static_cast<float>(e.value);
    case DeviceEditOp::kSubtract: return static_cast<float>(static_cast<double>(v) - e.value);
  }
  return v;
}

TEST(DeviceRowsTest, DrawsLikeSample) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.seed = 3;
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.seed = 3;
  for (const SamplingParams& p : {greedy, sampled}) {
    SequenceSamplingState host(p, {}), device(p, {});
    DeviceSamplingBatch batch;
    std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f};
    for (int step = 0; step < 4; ++step) {
      std::mt19937_64 before;
      AppendDeviceRow(p, device, 4, batch, &before);
      std::mt19937_64 probe = before;
      const DeviceSamplingRow& row = batch.rows.back();
      if (p.temperature > 0.0f) {
        EXPECT_EQ(row.u, UnitIntervalFromBits(probe()));
        EXPECT_EQ(row.inv_temperature, InverseTemperature(p.temperature));
      } else {
        EXPECT_EQ(row.u, 0.0);
      }
      std::vector<float> scratch = logits;
      const SampleResult r = Sample(scratch, p, host);
      device.Append(r.token);
      EXPECT_TRUE(host.rng() == device.rng()) << "step " << step;
    }
    EXPECT_EQ(batch.num_rows(), 4u);
    EXPECT_EQ(batch.edit_offsets.size(), 5u);
  }
}

TEST(DeviceRowsTest, EditsReproduceTheProcessors) {
  constexpr int64_t kVocab = 50;
  SamplingParams p;
  p.repetition_penalty = 1.4f;
  p.presence_penalty = 0.6f;
  p.frequency_penalty = -0.9f;
  p.logit_bias = {{7, 3.5f}, {3, -20.0f}, {49, 1.0f}, {60, 5.0f}};  // 60: outside, dropped
  p.min_tokens = 8;  // seven generated below: the stop ids are still banned
  p.min_tokens_stop_ids = {3, 9, 60};
  const std::vector<int32_t> prompt = {3, 4, 4, 9, 12, 77};
  SequenceSamplingState state(p, prompt);
  for (int32_t t : {4, 7, 7, 7, 20, 49, -1}) state.Append(t);

  std::vector<float> logits(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) logits[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i % 11) - 1.7f;
  std::vector<float> want = logits;
  ApplyLogitBias(want, p.logit_bias, nullptr);
  BanTokens(want, p.min_tokens_stop_ids, nullptr);
  ApplyRepetitionPenalty(want, p.repetition_penalty, state.prompt_counts(), state.generated_counts(), nullptr);
  ApplyPresenceFrequencyPenalties(want, p.presence_penalty, p.frequency_penalty, state.generated_counts(), nullptr);

  DeviceSamplingBatch batch;
  AppendDeviceRow(p, state, kVocab, batch);
  ASSERT_EQ(batch.edit_offsets.back(), static_cast<int32_t>(batch.edits.size()));
  EXPECT_TRUE(std::is_sorted(batch.edits.begin(), batch.edits.end(),
                             [](const DeviceLogitEdit& a, const DeviceLogitEdit& b) { return a.token < b.token; }));
  std::vector<float> got = logits;
  for (const DeviceLogitEdit& e : batch.edits) {
    ASSERT_TRUE(e.token >= 0 && e.token < kVocab);
    got[static_cast<size_t>(e.token)] = ApplyEdit(got[static_cast<size_t>(e.token)], e);
  }
  for (int64_t i = 0; i < kVocab; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "token " << i;
  EXPECT_EQ(got[9], -std::numeric_limits<float>::infinity());

  // The eighth token lifts the ban.
  state.Append(5);
  DeviceSamplingBatch after;
  AppendDeviceRow(p, state, kVocab, after);
  for (const DeviceLogitEdit& e : after.edits) EXPECT_TRUE(std::isfinite(e.value)) << e.token;
}

TEST(DeviceRowsTest, OverflowRowMatchesSample) {
  constexpr int64_t kVocab = 64;
  SamplingParams p;
  p.top_p = 0.5f;
  p.logit_bias = {{5, 2.0f}};
  p.frequency_penalty = 0.4f;
  p.seed = 11;
  p.logprobs = 3;
  SequenceSamplingState host(p, {}), device(p, {});
  for (int32_t t : {5, 6, 6}) {
    host.Append(t);
    device.Append(t);
  }
  std::vector<float> logits(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) logits[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i);
  DeviceSamplingBatch batch;
  std::mt19937_64 before;
  AppendDeviceRow(p, device, kVocab, batch, &before);
  // What the device leaves behind: edited logits and the raw values of the edited tokens.
  std::vector<float> edited = logits;
  std::vector<float> raw;
  for (const DeviceLogitEdit& e : batch.edits) raw.push_back(logits[static_cast<size_t>(e.token)]);
  for (const DeviceLogitEdit& e : batch.edits) edited[static_cast<size_t>(e.token)] = ApplyEdit(edited[static_cast<size_t>(e.token)], e);
  const SampleResult got = SampleOverflowRow(edited, batch.edits, raw, p, device, before);
  std::vector<float> scratch = logits;
  const SampleResult want = Sample(scratch, p, host);
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.logprob, want.logprob);
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  EXPECT_TRUE(host.rng() == device.rng());
  EXPECT_EQ(host.generated_counts(), device.generated_counts());
}

// Rows equal field by field, edits included (the values bit for bit).
void ExpectSameRows(const DeviceSamplingBatch& a, const DeviceSamplingBatch& b, const std::string& what) {
  ASSERT_EQ(a.num_rows(), b.num_rows()) << what;
  EXPECT_EQ(a.edit_offsets, b.edit_offsets) << what;
  ASSERT_EQ(a.edits.size(), b.edits.size()) << what;
  for (size_t i = 0; i < a.edits.size(); ++i) {
    EXPECT_EQ(a.edits[i].token, b.edits[i].token) << what << ", edit " << i;
    EXPECT_EQ(a.edits[i].op, b.edits[i].op) << what << ", edit " << i;
    EXPECT_EQ(std::bit_cast<uint64_t>(a.edits[i].value), std::bit_cast<uint64_t>(b.edits[i].value))
        << what << ", edit " << i;
  }
  for (size_t r = 0; r < a.rows.size(); ++r) {
    EXPECT_EQ(a.rows[r].temperature, b.rows[r].temperature) << what;
    EXPECT_EQ(a.rows[r].inv_temperature, b.rows[r].inv_temperature) << what;
    EXPECT_EQ(a.rows[r].top_k, b.rows[r].top_k) << what;
    EXPECT_EQ(a.rows[r].top_p, b.rows[r].top_p) << what;
    EXPECT_EQ(a.rows[r].min_p, b.rows[r].min_p) << what;
    EXPECT_EQ(a.rows[r].num_top_logprobs, b.rows[r].num_top_logprobs) << what;
    EXPECT_EQ(a.rows[r].u, b.rows[r].u) << what;
  }
}

// A draft tree's node row: the state with the node's path appended (a copy, as the tree's
// nodes used to be built) against the state untouched plus the path beside it.
TEST(DeviceRowsTest, RowAfterAPathEqualsTheRowOfTheAppendedState) {
  constexpr int64_t kVocab = 40;
  SamplingParams plain;
  plain.temperature = 0.0f;
  SamplingParams penalties;
  penalties.temperature = 0.7f;
  penalties.seed = 5;
  penalties.repetition_penalty = 1.3f;
  penalties.presence_penalty = 0.25f;
  penalties.frequency_penalty = 0.5f;
  penalties.logit_bias = {{2, 1.5f}, {39, -3.0f}, {45, 1.0f}};
  penalties.min_tokens = 7;  // 4 generated: paths of 3 or more lift the ban
  penalties.min_tokens_stop_ids = {1, 2};
  SamplingParams only_frequency;
  only_frequency.temperature = 1.0f;
  only_frequency.seed = 9;
  only_frequency.frequency_penalty = -0.75f;
  const std::vector<int32_t> prompt = {6, 6, 11, 30};
  const std::vector<std::vector<int32_t>> paths = {
      {}, {6}, {12}, {12, 12}, {3, 6, 12, 12}, {7, 50, 7, 2}, {-1, 39}, {8, 8, 8, 8, 8, 9},
  };
  for (const SamplingParams& p : {plain, penalties, only_frequency}) {
    SequenceSamplingState state(p, prompt);
    for (int32_t t : {6, 12, 3, 3}) state.Append(t);
    const auto draws = static_cast<unsigned long long>(DrawsPerToken(p));
    for (const std::vector<int32_t>& path : paths) {
      const std::string what = "temperature " + std::to_string(p.temperature) + ", path of " +
                               std::to_string(path.size());
      SequenceSamplingState copy = state;
      for (int32_t t : path) {
        copy.Append(t);
        copy.rng().discard(draws);
      }
      DeviceSamplingBatch want, got;
      std::mt19937_64 want_before, got_before;
      AppendDeviceRow(p, copy, kVocab, want, &want_before);
      const std::mt19937_64 untouched = state.rng();
      std::mt19937_64 rng = state.rng();
      rng.discard(draws * path.size());
      AppendDeviceRowAfter(p, state, path, rng, kVocab, got, &got_before);
      ExpectSameRows(want, got, what);
      EXPECT_TRUE(want_before == got_before) << what;
      EXPECT_TRUE(copy.rng() == rng) << what;  // the same draws taken
      EXPECT_TRUE(state.rng() == untouched) << what;
      EXPECT_EQ(state.num_generated(), 4) << what;
    }
  }
}

}  // namespace
}  // namespace peregrine
