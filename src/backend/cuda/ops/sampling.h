// Sampling on the device: logit edits, greedy argmax or one draw from the truncated
// temperature distribution, raw logprobs; token for token what peregrine::Sample() returns for
// the same logits, parameters and draws (rows built by AppendDeviceRow, src/sampling/device_rows.h).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct SamplingArgs {
  Tensor logits;        // [B, V] f32; scratch: the edits are applied in place
  Tensor rows;          // [B, 32] u8: DeviceSamplingRow
  Tensor edit_offsets;  // [B + 1] i32 (on the device; offsets[0] == 0, non-decreasing, last == E)
  Tensor edits;         // [E, 16] u8: DeviceLogitEdit; absent when E == 0
  Tensor edit_raw;      // [E] f32 out: raw logit of each edit's token; absent when E == 0
  Tensor tokens;        // [B] i32 out; -1 where status is overflow
  Tensor logprobs;      // [B] f32 out
  Tensor top_tokens;    // [B, 20] i32 out (-1 past the row's count)
  Tensor top_logprobs;  // [B, 20] f32 out
  Tensor status;        // [B] i32 out: 0 sampled, 1 overflow (sample that row with SampleOverflowRow)
  Tensor phase_stamps;  // optional [B, kernels::kSamplingPhases] i64 out: where the time goes (benchmarks)
};

// One block (on sm_90 a cluster at small batches) per row, no host synchronisation,
// capture-safe (the grid depends on B alone and every per-row value is read on the device).
// InvalidArgument (naming the tensor) for bad shapes, dtypes, devices or alignment, V outside
// [1, 2^18]; Internal when the launch fails.
// Asynchronous on `stream`; the offsets' contents are trusted (the host builds them).
Status Sample(const SamplingArgs& args, cudaStream_t stream);

// A drafter's candidates (kernels/draft_candidates.cuh): per row the K most likely tokens
// (larger logit, then lower id) and their log-probabilities under the row's softmax, to ~1e-5
// of the host's raw logprobs; one pass over the row, no edits, no draws.
struct DraftCandidatesArgs {
  Tensor logits;        // [B, V] f32
  Tensor bias;          // optional [B, V] f32 added to the logits first (the block drafter's Markov term)
  Tensor tokens;        // [B] i32 out: each row's most likely token
  Tensor top_tokens;    // optional [B, W] i32 out: columns [column, column + k)
  Tensor top_logprobs;  // optional [B, W] f32 out (-inf past the row's count; tokens -1 there)
  int64_t column = 0;
  int64_t k = 1;  // 1..kernels::kDraftMaxCandidates (16)
  bool one_cta_per_row = false;  // tests: the form taken where clusters are not available
};

Status DraftCandidates(const DraftCandidatesArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
