// ModelRunner on the CUDA backend: the engine's steps run as DeepSeek-V4 forwards on one GPU
// (deepseek_v4::cuda::CudaModel); each sequence's device state lives in its KV slot.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/allocator.h"
#include "sampling/device_rows.h"

#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/model_runner.h"

namespace peregrine {

class CudaModelRunner final : public ModelRunner {
 public:
  // `device_sampling`: sample on the GPU (kernels/sampling.cuh), so only token ids cross to
  // the host; otherwise the engine samples the copied logits.
  CudaModelRunner(std::unique_ptr<deepseek_v4::cuda::CudaModel> model, bool device_sampling);

  // Fails (Internal) when a chunk continues a slot at another position than where its
  // state stands: the engine and the device state disagree.
  Status Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) override;
  bool samples_on_device() const override { return device_sampling_; }
  Status RunAndSample(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling,
                      std::vector<SampleResult>* results) override;
  void Release(int64_t seq_id) override;
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t max_context() const override { return model_->options().max_context; }
  std::vector<int32_t> eos_token_ids() const override;

 private:
  // Builds the step's chunks, checking each slot's position.
  Status PlanChunks(std::span<const RunnerChunk> chunks);
  // Records where each slot's state stands after a step (or that it is unusable).
  void Advance(std::span<const RunnerChunk> chunks, const Status& status);
  // Device buffers for the sampling rows and results, grown (outside any capture) as needed.
  Status EnsureSamplingBuffers(size_t rows, size_t edits);

  std::unique_ptr<deepseek_v4::cuda::CudaModel> model_;
  bool device_sampling_ = false;
  std::vector<int64_t> slot_positions_;  // [num_slots] next position of the slot's state, -1 free
  std::vector<deepseek_v4::StepChunk> step_;
  // Device sampling.
  DeviceSamplingBatch batch_;
  std::vector<std::mt19937_64> rng_before_;
  size_t row_capacity_ = 0, edit_capacity_ = 0;
  peregrine::cuda::DeviceBuffer rows_d_, offsets_d_, edits_d_, edit_raw_d_, tokens_d_, logprobs_d_, top_tokens_d_,
      top_logprobs_d_, status_d_;
  std::vector<int32_t> tokens_, top_tokens_, status_;
  std::vector<float> logprobs_, top_logprobs_, edit_raw_;
};

}  // namespace peregrine
