// DeepSeek-V4 on the CUDA backend as a device model (model/device_model.h): device weights,
// the step workspace, the host plan of a step into the runtime's metadata and the batched
// forward of one engine step (prefill chunks and decode tokens together), built from the ops
// in backend/cuda. The runtime (runtime/device_executor.h) owns the stream the step runs on,
// the metadata staging, the graphs, the profiler and the KV pools this model binds.
//
// Ownership: one CudaModel owns its weights and workspace; the engine's step thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "config/model_config.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/device_weights.h"
#include "model/deepseek_v4/kv_geometry.h"
#include "model/deepseek_v4/step_plan.h"
#include "model/device_model.h"

namespace peregrine::deepseek_v4::cuda {

class CudaModel final : public DeviceModel {
 public:
  // Loads (or generates) the weights and allocates every buffer a step can need, so a step
  // never allocates. ResourceExhausted when the device cannot hold them. Sharded
  // (`parallel.size` > 1): this rank's part of the weights (its ShardSpec overrides
  // `weights.shard`); each step all-reduces the attention and MoE outputs and all-gathers
  // the head's vocabulary parts over `parallel.comm`, so every rank ends with the same logits.
  static Result<std::unique_ptr<CudaModel>> Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                   const DeviceModelLimits& limits, const WeightLoadOptions& weights,
                                                   peregrine::cuda::CachingAllocator& allocator, cudaStream_t stream,
                                                   const DeviceParallel& parallel = {});
  ~CudaModel() override;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const override;
  uint64_t weight_bytes() const override;
  KvLayout kv_layout() const override;
  Status BindKv(const DeviceKvPools& pools) override;
  int64_t meta_capacity(int64_t rows, int64_t chunks) const override;
  Result<DeviceStep> Plan(std::span<const ChunkView> chunks, int64_t rows, StepMeta& meta) override;
  Status EnqueueRestores(std::span<const ChunkView> chunks, cudaStream_t stream) override;
  Status Enqueue(const DeviceStep& step, const StepMeta& meta, cudaStream_t stream, OpProfiler* profiler) override;
  Status EnqueueSnapshots(std::span<const ChunkView> chunks, const DeviceStep& step, cudaStream_t stream) override;
  // Speculative verify of draft trees (step_plan.h): the kept root path's staged window rows,
  // compressor rows and entries into the slot (cuda_verify.cc).
  Status EnqueueCommit(std::span<const TreeCommit> commits, cudaStream_t stream) override;
  // The drafter, loaded when limits.max_draft_steps > 0: the block drafter
  // (cuda_block_drafter.cc) when the config has DSpark's keys and the checkpoint
  // mtp.0.main_proj.weight, else the MTP layer (cuda_drafter.cc) when it has mtp.0.e_proj.weight.
  bool has_drafter() const override;
  int64_t draft_meta_capacity() const override;
  Result<DraftShape> PlanDraft(std::span<const DevicePairs> inputs, int32_t num_steps, StepMeta& meta) override;
  Status EnqueueDraft(const StepMeta& meta, cudaStream_t stream) override;
  Tensor draft_tokens() const override;
  Tensor draft_candidate_tokens() const override;
  Tensor draft_candidate_logprobs() const override;
  Tensor logits(int64_t rows) const override;
  std::vector<std::string> op_kinds() const override;
  // Per layer: the window ring (bf16), then the compressor rings and the indexer's (f32);
  // a block: per compressed layer its entries (bf16) and index keys (bf16).
  std::vector<DeviceRegion> SlotRegions(int32_t slot) const override;
  std::vector<DeviceRegion> BlockRegions(int32_t block) const override;

  const KvGeometry& geometry() const;

  struct Impl;

 private:
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The device weight options of a family-neutral request (expert and dense formats by name).
Result<WeightLoadOptions> WeightOptions(const DeviceWeightOptions& options);

// Registers DeepSeek-V4 on the CUDA backend under model_type "deepseek_v4".
void RegisterDeviceModel(DeviceModelRegistry& registry);

}  // namespace peregrine::deepseek_v4::cuda
