// DeepSeek-V4 on the CPU reference backend: loads a checkpoint directory and runs the
// forward over chunks of a sequence, carrying the incremental state between chunks.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "config/model_config.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4 {

class Model {
 public:
  // Reads DIR/config.json and the safetensors shards; weights stay mapped where stored fp32.
  static Result<std::unique_ptr<Model>> Load(const std::filesystem::path& dir, int num_threads);
  // Builds the model from any Checkpoint (e.g. synthetic weights), which it keeps alive.
  static Result<std::unique_ptr<Model>> Create(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint,
                                               int num_threads);

  const ModelConfig& config() const { return config_; }
  SequenceState NewSequence() const { return SequenceState::Create(config_); }

  // Runs `tokens` at positions state.num_tokens, state.num_tokens + 1, ... and advances the
  // state. Writes logits [T, vocab] for every token when `all_logits`, else [1, vocab] for
  // the last one. Fails (leaving the state untouched) on an id outside [0, vocab).
  Status Forward(SequenceState& state, std::span<const int32_t> tokens, bool all_logits,
                 std::vector<float>* logits);

 private:
  Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights, int num_threads);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;  // owns the mappings `weights_` may borrow
  ModelWeights weights_;
  RopeTable rope_main_;
  RopeTable rope_compress_;
  cpu::ThreadPool pool_;
};

}  // namespace peregrine::deepseek_v4
