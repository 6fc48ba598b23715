// Prompt logprobs on the device (RunnerScoring) for the CUDA runner: one pass of the device
// sampler over a step's logits rows, each scored row greedy with a +1e30 edit on its target,
// so the chosen token is the target and its raw logprob and alternatives come out exactly as
// for a sampled token (the sampler reports raw logprobs, before edits); CountLogitsAbove
// gives the ranks. Rows that are not scored are greedy without logprobs and never edited, so
// the sampled rows of the same step are left as they were.
//
// One scorer per launch slot: its pinned results stay valid until the slot is collected.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/allocator.h"
#include "base/tensor.h"
#include "runtime/model_runner.h"
#include "sampling/device_rows.h"

namespace peregrine {

class DeviceScorer {
 public:
  void Clear();
  // A chunk whose logits rows start at `first_row` of the step's logits.
  void AddChunk(int64_t first_row, const RunnerScoring& scoring);
  bool empty() const { return chunk_rows_.empty(); }
  // Enqueues the ranks and the scoring pass over `logits` [R, vocab] (every row of the step)
  // and the copies of the results into pinned memory. Scored rows' logits are edited.
  Status Enqueue(const Tensor& logits, cudaStream_t stream, cuda::CachingAllocator& allocator);
  // After the step's work has completed: one entry per added chunk.
  Result<std::vector<ChunkScores>> Read() const;

 private:
  Status EnsureCapacity(size_t num_rows, size_t num_items, cuda::CachingAllocator& allocator);

  std::vector<size_t> chunk_rows_;      // per chunk: its scored rows
  std::vector<int32_t> chunk_tops_;     // per chunk: alternatives per row
  std::vector<int32_t> rows_, targets_;  // per scored row: its logits row and target
  size_t num_logit_rows_ = 0;
  DeviceSamplingBatch batch_;
  size_t row_capacity_ = 0, item_capacity_ = 0;
  cuda::PinnedHostBuffer in_h_, out_h_;
  cuda::DeviceBuffer in_d_, out_d_;
};

}  // namespace peregrine
