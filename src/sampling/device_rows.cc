// AppendDeviceRow, AppendDeviceRowAfter and SampleOverflowRow; see device_rows.h.
#include "sampling/device_rows.h"

#include <algorithm>
#include <limits>

#include "sampling/cdf_walk.h"
#include "sampling/weights.h"

namespace peregrine {
namespace {

bool IsInVocab(int32_t token, int64_t vocab_size) { return token >= 0 && token < vocab_size; }

}  // namespace

void DeviceSamplingBatch::Clear() {
  rows.clear();
  edit_offsets.assign(1, 0);
  edits.clear();
}

void AppendDeviceRow(const SamplingParams& params, SequenceSamplingState& state, int64_t vocab_size,
                     DeviceSamplingBatch& batch, std::mt19937_64* rng_before) {
  AppendDeviceRowAfter(params, state, {}, state.rng(), vocab_size, batch, rng_before);
}

void AppendDeviceRowAfter(const SamplingParams& params, const SequenceSamplingState& state,
                          std::span<const int32_t> path, std::mt19937_64& rng, int64_t vocab_size,
                          DeviceSamplingBatch& batch, std::mt19937_64* rng_before) {
  const size_t first = batch.edits.size();
  auto add = [&](int32_t token, DeviceEditOp op, double value) {
    batch.edits.push_back({token, static_cast<int32_t>(op), value});
  };
  // The generated counts as if `path` were appended: each counted token once, the state's
  // first, then the path's tokens the state has not generated (the edits are sorted by token
  // below, so only the order of each token's own edits matters).
  const auto& generated = state.generated_counts();
  auto in_path = [&](int32_t token) {
    return static_cast<int32_t>(std::count(path.begin(), path.end(), token));
  };
  auto for_each_generated = [&](auto&& visit) {
    for (const auto& [token, count] : generated) visit(token, count + in_path(token));
    for (size_t i = 0; i < path.size(); ++i) {
      const int32_t token = path[i];
      if (generated.contains(token) || std::find(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(i), token) !=
                                           path.begin() + static_cast<std::ptrdiff_t>(i))
        continue;
      visit(token, in_path(token));
    }
  };
  // The order of Sample(): logit_bias, repetition penalty, presence/frequency penalties.
  for (const auto& [token, bias] : params.logit_bias) {
    if (IsInVocab(token, vocab_size)) add(token, DeviceEditOp::kAdd, bias);
  }
  if (state.num_generated() + static_cast<int64_t>(path.size()) < params.min_tokens) {
    for (int32_t token : params.min_tokens_stop_ids)
      if (IsInVocab(token, vocab_size)) add(token, DeviceEditOp::kAdd, -std::numeric_limits<double>::infinity());
  }
  const auto& prompt = state.prompt_counts();
  if (params.repetition_penalty != 1.0f) {
    for (const auto& [token, count] : prompt) {
      if (count > 0 && IsInVocab(token, vocab_size)) add(token, DeviceEditOp::kRepetition, params.repetition_penalty);
    }
    for_each_generated([&](int32_t token, int32_t count) {
      if (count <= 0 || !IsInVocab(token, vocab_size)) return;
      const auto in_prompt = prompt.find(token);
      if (in_prompt != prompt.end() && in_prompt->second > 0) return;
      add(token, DeviceEditOp::kRepetition, params.repetition_penalty);
    });
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    for_each_generated([&](int32_t token, int32_t count) {
      if (count <= 0 || !IsInVocab(token, vocab_size)) return;
      // Exactly logits_processors.cc's double expression (this library has no FMA contraction).
      const double amount = params.presence_penalty + static_cast<double>(params.frequency_penalty) * count;
      add(token, DeviceEditOp::kSubtract, amount);
    });
  }
  std::stable_sort(batch.edits.begin() + static_cast<std::ptrdiff_t>(first), batch.edits.end(),
                   [](const DeviceLogitEdit& a, const DeviceLogitEdit& b) { return a.token < b.token; });
  batch.edit_offsets.push_back(static_cast<int32_t>(batch.edits.size()));

  DeviceSamplingRow row;
  row.temperature = params.temperature;
  row.top_k = params.top_k;
  row.top_p = params.top_p;
  row.min_p = params.min_p;
  row.num_top_logprobs = std::min(params.logprobs, kMaxTopLogprobs);
  if (rng_before != nullptr) *rng_before = rng;
  // Sample()'s test: an unvalidated negative or NaN temperature is greedy too.
  if (params.temperature > 0.0f) {
    row.inv_temperature = InverseTemperature(params.temperature);
    row.u = UnitIntervalFromBits(rng());
  }
  batch.rows.push_back(row);
}

SampleResult SampleOverflowRow(std::span<float> edited_logits, std::span<const DeviceLogitEdit> row_edits,
                               std::span<const float> row_edit_raw, const SamplingParams& params,
                               SequenceSamplingState& state, const std::mt19937_64& rng_before) {
  for (size_t e = 0; e < row_edits.size() && e < row_edit_raw.size(); ++e) {
    const int32_t token = row_edits[e].token;
    if (IsInVocab(token, static_cast<int64_t>(edited_logits.size()))) edited_logits[static_cast<size_t>(token)] = row_edit_raw[e];
  }
  state.rng() = rng_before;
  return Sample(edited_logits, params, state);
}

}  // namespace peregrine
