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
  // Overlapped steps only: >= 0 when the last token is the one the previous launched step
  // sampled for its sampling row `fed_from` (not on the host yet; tokens.back() is a
  // placeholder the runner ignores).
  int32_t fed_from = -1;
};

// Device time of the steps a runner has completed (runners that time their device; zero
// otherwise). idle_s counts the device's waits between consecutive steps while the engine
// had work (the host's share of a step that overlap hides), not its waits for requests.
struct DeviceTime {
  double busy_s = 0.0;
  double idle_s = 0.0;
  int64_t steps = 0;
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
  // Overlapped steps: runners that can launch a step before the previous one's tokens reach
  // the host say so; the engine then plans and launches step n+1 while the device runs step n
  // and post-processes step n while the device runs step n+1.
  virtual bool supports_overlap() const { return false; }
  // Enqueues a step and returns without waiting for it; its samples come from Collect, in
  // launch order. A chunk with fed_from >= 0 reads its last token from the previous launched
  // step's samples. At most two launched steps may wait to be collected; sampling states must
  // stay alive until their step is collected. A failure enqueues nothing and leaves the
  // chunks' sequences' state unusable.
  virtual Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) {
    (void)chunks;
    (void)sampling;
    return Unimplemented("this runner does not overlap steps");
  }
  // Waits for the oldest launched step and returns one result per sampling row, as
  // RunAndSample would. Rows with skip[i] set are not wanted any more (their sequence finished
  // or restarts): their sampling state is left untouched and their result is empty.
  // refeed_failed[i] is set when the device had no token for row i when the next step read it
  // (the row was finished on the host), so a chunk fed from that row computed on a wrong token
  // and its sequence must restart. A failure leaves the step's sequences' state unusable.
  virtual Status Collect(std::span<const uint8_t> skip, std::vector<SampleResult>* results,
                         std::vector<uint8_t>* refeed_failed) {
    (void)skip;
    (void)results;
    (void)refeed_failed;
    return Unimplemented("this runner does not overlap steps");
  }
  virtual DeviceTime device_time() const { return {}; }
  // The engine has run out of work and waits for requests: the wait before the next step is
  // not idle time of a busy device.
  virtual void NoteIdle() {}
  // Drops a sequence's state (finished, aborted or preempted).
  virtual void Release(int64_t seq_id) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
};

}  // namespace peregrine
