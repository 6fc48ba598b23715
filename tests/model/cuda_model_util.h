// Shared steps of the CUDA model tests (cuda_parity_test, cuda_fp8_test, cuda_mxfp4_test):
// the device model on a runtime whose slots own fixed block tables (as sequences outside an
// engine), prefilling a prompt through it, and batched decode steps run on the device and
// the CPU backend side by side.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/model.h"
#include "runtime/device_executor.h"

namespace peregrine::testing {

// One sequence's part of a step on a SlotModel.
struct StepChunk {
  int32_t slot = 0;
  int64_t first_position = 0;
  std::span<const int32_t> tokens;
  bool needs_logits = false;
  bool all_logits = false;
  std::span<const int32_t> tree_parents;  // a draft tree to verify (ChunkView::tree_parents)
};

struct SlotModelOptions {
  int64_t num_slots = 4;
  int64_t max_tokens = 1024;
  int64_t max_context = 1024;
  int64_t max_logit_rows = 0;  // 0: num_slots
  int64_t block_tokens = 256;
  bool batch_invariant = false;  // --enable-deterministic-inference
  bool kv_cache_fp8 = false;     // --kv-cache-dtype fp8
  int64_t max_verify_rows = 0;   // draft-tree nodes a step may verify
  int32_t max_draft_steps = 0;   // > 0: load the checkpoint's drafter (DeviceModelLimits)
  int32_t draft_candidates = 1;
  deepseek_v4::cuda::WeightLoadOptions weights;
  DeviceParallel parallel;  // this rank's part and group (size 1: the whole model)
};

// The DeepSeek-V4 device model on a DeviceExecutor; slot s owns blocks [s*K, (s+1)*K) for K
// blocks of max_context tokens, so chunks name only their slot and positions.
class SlotModel {
 public:
  static Result<std::unique_ptr<SlotModel>> Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                   const SlotModelOptions& options);
  Status Forward(std::span<const StepChunk> chunks, std::vector<float>* logits);
  Status EnableGraphs(int64_t max_batch) { return executor_->EnableGraphs(max_batch); }
  uint64_t weight_bytes() const { return executor_->weight_bytes(); }
  DeviceExecutor& executor() { return *executor_; }
  std::span<const int32_t> blocks(int32_t slot) const { return tables_[static_cast<size_t>(slot)]; }

 private:
  std::unique_ptr<DeviceExecutor> executor_;
  std::vector<std::vector<int32_t>> tables_;
};

// Prefills `prompt` into `slot` from position 0 in steps of `chunk` tokens; returns the logits
// of every token [T, V] (empty, with the failure recorded, when a step fails).
std::vector<float> PrefillLogits(SlotModel& model, int32_t slot, std::span<const int32_t> prompt, int64_t chunk);

// Prefills the prompt's first lengths[i] tokens into a CPU sequence and into device slot
// first_slot + i (in steps of `chunk` tokens), then runs `steps` decode steps of batch 1, 2,
// 3, 1, ... (graph buckets with padding rows when graphs are on) on both backends, feeding
// each sequence the prompt's next tokens. Returns each step's relative L2 between the two
// backends' logits (empty, with the failure recorded, when a step fails).
std::vector<double> BatchedDecodeErrors(SlotModel& model, deepseek_v4::Model& cpu, std::span<const int32_t> prompt,
                                        std::span<const int64_t> lengths, int32_t first_slot, int64_t chunk,
                                        int steps = 6);

}  // namespace peregrine::testing
