// ModelRunner: runs one engine step's batch on a backend. The engine plans (which tokens of
// which sequences), the runner owns the per-sequence model state and the device work.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace peregrine {

// One sequence's part of a step: tokens at positions first_position, first_position + 1, ...
struct RunnerChunk {
  int64_t seq_id = 0;
  int32_t slot = 0;                  // the sequence's KV slot (kv_cache/kv_manager.h)
  int64_t first_position = 0;        // 0 starts (or restarts, after preemption) the sequence
  std::span<const int32_t> tokens;   // [T]
  bool needs_logits = false;         // the last token's logits feed the sampler
};

// A chunk's sampling inputs, for runners that sample on their device.
struct RunnerSampling {
  const SamplingParams* params = nullptr;
  SequenceSamplingState* state = nullptr;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Runs every chunk; appends one [vocab] row to `logits` per chunk with needs_logits, in
  // chunk order. A failure fails the whole step and leaves the sequences' state unusable
  // (the engine errors those requests out).
  virtual Status Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) = 0;
  // Runners that sample on their device (the logits never cross to the host) say so; the
  // engine then calls RunAndSample instead of Run + Sample().
  virtual bool samples_on_device() const { return false; }
  // Runs every chunk and samples one token per entry of `sampling` (one per chunk with
  // needs_logits, in chunk order) exactly as Sample() would, recording each in its state.
  virtual Status RunAndSample(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling,
                              std::vector<SampleResult>* results) {
    (void)chunks;
    (void)sampling;
    (void)results;
    return Unimplemented("this runner samples on the host");
  }
  // Drops a sequence's state (finished, aborted or preempted).
  virtual void Release(int64_t seq_id) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
};

}  // namespace peregrine
