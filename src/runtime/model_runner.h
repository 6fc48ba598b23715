// ModelRunner: runs one engine step's batch on a backend. The engine plans (which tokens of
// which sequences), the runner owns the per-sequence model state and the device work.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace peregrine {

// One sequence's part of a step: tokens at positions first_position, first_position + 1, ...
struct RunnerChunk {
  int64_t seq_id = 0;
  int32_t slot = 0;                  // the sequence's KV slot (kv_cache/kv_manager.h)
  int64_t first_position = 0;        // 0 starts (or restarts, after preemption) the sequence
  std::span<const int32_t> tokens;   // [T]
  bool needs_logits = false;         // the last token's logits feed the sampler
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Runs every chunk; appends one [vocab] row to `logits` per chunk with needs_logits, in
  // chunk order. A failure fails the whole step and leaves the sequences' state unusable
  // (the engine errors those requests out).
  virtual Status Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) = 0;
  // Drops a sequence's state (finished, aborted or preempted).
  virtual void Release(int64_t seq_id) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
};

}  // namespace peregrine
