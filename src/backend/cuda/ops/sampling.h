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

}  // namespace peregrine::cuda
