// ModelRunner on the CPU reference backend: one SequenceState per sequence, every step one
// batched forward (each sequence's logits depend on its own tokens only: batch-invariant).
#pragma once

#include <memory>
#include <unordered_map>

#include "model/deepseek_v4/model.h"
#include "runtime/model_runner.h"

namespace peregrine {

class CpuModelRunner final : public ModelRunner {
 public:
  explicit CpuModelRunner(std::unique_ptr<deepseek_v4::Model> model);

  Status Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) override;
  void Release(int64_t seq_id) override { states_.erase(seq_id); }
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t max_context() const override { return model_->config().max_position_embeddings; }
  std::vector<int32_t> eos_token_ids() const override;

 private:
  std::unique_ptr<deepseek_v4::Model> model_;
  std::unordered_map<int64_t, deepseek_v4::SequenceState> states_;
};

}  // namespace peregrine
