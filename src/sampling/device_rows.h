// The host half of device sampling: turns (SamplingParams, SequenceSamplingState) rows into the
// device sampler's row descriptors, logit edits and draws, consuming each request's RNG exactly
// as Sample() would (one draw per non-greedy step, none for greedy). No CUDA here; the layouts
// mirror kernels/sampling.cuh (checked by static_assert in src/backend/cuda/ops/sampling.cc).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace peregrine {

// What an edit does to its token's logit, applied on the device in list order per token.
enum class DeviceEditOp : int32_t {
  kAdd = 0,         // logit + float(value): logit_bias
  kRepetition = 1,  // logit > 0 ? logit / float(value) : logit * float(value)
  kSubtract = 2,    // float(double(logit) - value): presence + frequency * count, in double
};

// Edits carry an operation, not a value computed from the raw logit: the raw logit lives on the
// device, and applying the host's operations there in the host's order gives the same floats.
struct DeviceLogitEdit {
  int32_t token = 0;
  int32_t op = 0;  // DeviceEditOp
  double value = 0.0;
};

struct DeviceSamplingRow {
  float temperature = 0.0f;      // !(temperature > 0): greedy
  float inv_temperature = 0.0f;  // InverseTemperature(temperature); 0 when greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t num_top_logprobs = -1;  // params.logprobs capped at kMaxTopLogprobs
  double u = 0.0;                 // UnitIntervalFromBits(one draw); 0 when greedy
};

// One step's rows in launch order. edit_offsets has rows.size() + 1 entries; row b's edits are
// edits[edit_offsets[b], edit_offsets[b + 1]), sorted by token and, per token, in the order
// Sample() applies them (logit_bias, repetition, presence/frequency). Ids outside the
// vocabulary are dropped, as Sample() skips them.
struct DeviceSamplingBatch {
  std::vector<DeviceSamplingRow> rows;
  std::vector<int32_t> edit_offsets{0};
  std::vector<DeviceLogitEdit> edits;

  void Clear();
  size_t num_rows() const { return rows.size(); }
};

// Appends the row of one request. Draws from state.rng() as Sample() would; does not Append the
// token to `state` (the caller does, once the device has chosen it). When `rng_before` is not
// null it receives the generator as it was before the draw (for SampleOverflowRow).
void AppendDeviceRow(const SamplingParams& params, SequenceSamplingState& state, int64_t vocab_size,
                     DeviceSamplingBatch& batch, std::mt19937_64* rng_before = nullptr);

// The row `state` would give once the tokens of `path` were appended to it (the counts and
// min_tokens see them), drawing from `rng` (the caller's generator for this row, e.g. a copy of
// the state's advanced past the path's draws). `state` does not change and is not copied: a
// draft tree's nodes take their rows this way, each with the state of its path, and without
// penalties a row costs the same however many tokens the request has generated.
void AppendDeviceRowAfter(const SamplingParams& params, const SequenceSamplingState& state,
                          std::span<const int32_t> path, std::mt19937_64& rng, int64_t vocab_size,
                          DeviceSamplingBatch& batch, std::mt19937_64* rng_before = nullptr);

// A row the device could not sample (status kSamplingOverflow): restores the raw logits from the
// device's edited row and its edit_raw entries, rewinds the RNG to `rng_before` and runs Sample(),
// which draws the same u, records the token in `state` and returns what the device would have.
SampleResult SampleOverflowRow(std::span<float> edited_logits, std::span<const DeviceLogitEdit> row_edits,
                               std::span<const float> row_edit_raw, const SamplingParams& params,
                               SequenceSamplingState& state, const std::mt19937_64& rng_before);

}  // namespace peregrine
