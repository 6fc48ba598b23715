#include "runtime/cpu_model_runner.h"

#include <string>

namespace peregrine {

CpuModelRunner::CpuModelRunner(std::unique_ptr<deepseek_v4::Model> model) : model_(std::move(model)) {}

std::vector<int32_t> CpuModelRunner::eos_token_ids() const {
  std::vector<int32_t> ids;
  for (int64_t id : model_->config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

Status CpuModelRunner::Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) {
  // One batched forward over every chunk: weights are read once per step, not per sequence.
  std::vector<deepseek_v4::Model::Chunk> batch;
  batch.reserve(chunks.size());
  for (const RunnerChunk& chunk : chunks) {
    auto it = states_.find(chunk.seq_id);
    if (chunk.first_position == 0) {
      // A (re)start: recompute from scratch, as after preemption.
      it = states_.insert_or_assign(chunk.seq_id, model_->NewSequence()).first;
    } else if (it == states_.end() || it->second.num_tokens != chunk.first_position) {
      return Internal("runner state out of step for sequence " + std::to_string(chunk.seq_id));
    }
    batch.push_back({&it->second, chunk.tokens, /*all_logits=*/false, chunk.needs_logits});
  }
  return model_->Forward(batch, logits);
}

}  // namespace peregrine
