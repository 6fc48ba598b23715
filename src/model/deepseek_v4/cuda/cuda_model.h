// DeepSeek-V4 on the CUDA backend: device weights, per-slot device state (window rings,
// compressor rings, compressed caches) and the batched forward of one engine step (prefill
// chunks and decode tokens together), built from the ops in backend/cuda.
//
// Ownership: one CudaModel owns its device allocations, one stream and one cuBLAS handle,
// and is used by one thread (the engine's step thread). Forward enqueues the whole step on
// the stream and waits for the logits; Launch enqueues it and returns, so the host can plan
// the next step while this one runs. State slots are the engine's KV slots.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "config/model_config.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/device_weights.h"
#include "model/deepseek_v4/step_plan.h"

namespace peregrine::deepseek_v4::cuda {

struct CudaModelOptions {
  int device = 0;
  int64_t num_slots = 64;      // sequences with device state at once
  int64_t max_tokens = 2048;   // tokens per step (prefill chunks + decode tokens)
  int64_t max_context = 8192;  // positions per sequence the state holds
  int64_t max_logit_rows = 0;  // logits rows per step (0: num_slots, one per sequence)
  WeightLoadOptions weights;
};

// Time per op kind of the last profiled step (milliseconds of GPU time, CUDA events).
struct OpProfile {
  std::string name;
  double ms = 0.0;
  int64_t launches = 0;
};

class CudaModel {
 public:
  // Loads (or generates) the weights and allocates every buffer a step can need, so a step
  // never allocates. ResourceExhausted when the device cannot hold them.
  static Result<std::unique_ptr<CudaModel>> Create(ModelConfig config, const Checkpoint& checkpoint,
                                                   const CudaModelOptions& options);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const;
  const CudaModelOptions& options() const;
  uint64_t weight_bytes() const;
  uint64_t state_bytes() const;

  // Called with the step's device logits [R, vocab] f32 (valid until the next step) on the
  // model's stream, after the forward is enqueued; whatever it enqueues finishes before
  // Forward returns.
  using LogitsHook = std::function<Status(const Tensor& logits, cudaStream_t stream)>;

  // Runs the step; `logits` gets [R, vocab] f32 for the chunks with needs_logits, in chunk
  // order (with a hook, the logits stay on the device and `logits` may be null). Token ids
  // are checked on the host first (InvalidArgument, no state touched); a device failure
  // leaves the touched slots' state unusable (their sequences must restart).
  Status Forward(std::span<const StepChunk> chunks, std::vector<float>* logits, const LogitsHook& hook = {});

  // Enqueues the step and returns without waiting for it: `hook` gets the step's device
  // logits and enqueues what reads them (sampling, copies, an event to wait on); it must not
  // wait for the stream either. Chunks with fed_from >= 0 take their last token from
  // `fed_tokens` [num_fed_tokens] (device memory the previous step's hook wrote; read when
  // this step runs, in stream order). The host's staging for a step is reused two launches
  // later, after its copy has run, so any number of steps may be queued. Errors as Forward.
  Status Launch(std::span<const StepChunk> chunks, const LogitsHook& hook, const int32_t* fed_tokens = nullptr,
                int64_t num_fed_tokens = 0);

  // Host time of the last Forward or Launch from its start until the step's GPU work was
  // enqueued (checks, plan, metadata upload, graph launch or op launches). With Launch the
  // host does this while the GPU runs the previous step.
  double last_host_ms() const;

  // The stream every step runs on (callers time steps with events on it).
  cudaStream_t stream() const;

  // The model's device allocator (for callers' own step buffers, allocated outside capture).
  peregrine::cuda::CachingAllocator& allocator();

  // Decode steps replay one captured CUDA graph per batch-size bucket (powers of two up to
  // `max_batch`); off, every step is launched op by op.
  Status EnableGraphs(int64_t max_batch);

  // Profiled forward: the same step, op by op with events between ops (no graph); `profile`
  // gets the GPU time per op kind and `total_ms` the wall time of the step on the GPU.
  Status ProfileForward(std::span<const StepChunk> chunks, std::vector<OpProfile>* profile, double* total_ms);

  struct Impl;

 private:
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::deepseek_v4::cuda
