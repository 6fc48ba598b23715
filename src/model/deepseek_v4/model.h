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

  // One sequence's part of a batched forward.
  struct Chunk {
    SequenceState* state = nullptr;
    std::span<const int32_t> tokens;  // at positions state->num_tokens, +1, ...
    bool all_logits = false;          // logits for every token, else for the last only
    bool needs_logits = true;         // false: no logits for this chunk at all
  };

  // Runs every chunk in one pass (projections, experts and the head batched over all
  // tokens; attention per sequence) and advances the states. `logits` gets the requested
  // rows [rows, vocab] in chunk order. A chunk's results do not depend on the others.
  // Fails before touching any state when an id is outside [0, vocab) or a sequence would
  // pass max_position_embeddings.
  Status Forward(std::span<const Chunk> batch, std::vector<float>* logits);

  // One sequence: logits [T, vocab] when `all_logits`, else [1, vocab] for the last token.
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
