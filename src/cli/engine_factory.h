// Builds the serving engine for `peregrine serve`: the model (a checkpoint directory or the
// embedded demo), its runner, KV bookkeeping sized from the options, and the step loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/model_config.h"
#include "distributed/communicator.h"
#include "distributed/parallel_config.h"
#include "engine/engine.h"
#include "model/host_model.h"
#include "model/checkpoint.h"
#include "speculative/speculative_config.h"

namespace peregrine::cli {

struct EngineOptions {
  std::string model_path;                 // empty: the embedded demo model (trained; random with synthetic_weights)
  int threads = 2;                        // CPU backend threads
  int64_t max_num_seqs = 256;             // running sequences per step
  int64_t max_scored_rows = 256;          // prompt-logprob rows per step (a [vocab] logits row each)
  int64_t max_num_batched_tokens = 2048;  // token budget per step
  int64_t max_num_waiting = 4096;         // bounded waiting queue
  int64_t long_prefill_token_threshold = 0;  // > 0: prefill chunks capped while requests wait
  int64_t kv_cache_tokens = 0;            // > 0: tokens of context the KV blocks hold (CPU default 262144;
                                          //   CUDA default: what gpu_memory_utilization leaves)
  int64_t block_size = 256;               // tokens per KV block (rounded up to what the model needs)
  bool enable_prefix_caching = true;
  double kv_snapshot_fraction = 0.1;      // of the KV blocks' bytes, for prefix-cache snapshots
  double gpu_memory_utilization = 0.9;    // CUDA: fraction of the device the process may use
  // Backend and model shape.
  std::string device = "cpu";             // "cpu" or "cuda"
  bool synthetic_weights = false;         // random weights for the model_path's config.json (or the random demo config)
  int64_t num_layers = 0;                 // > 0: keep only the first num_layers layers
  int64_t max_model_len = 0;              // > 0: context per sequence (CUDA state size)
  std::string expert_format = "bf16";     // CUDA routed experts: "bf16" or "mxfp4"
  std::string dense_format = "bf16";      // CUDA dense projections: "bf16" or "fp8"
  bool enforce_eager = false;             // CUDA: no decode graphs
  bool device_sampling = true;            // CUDA: sample on the GPU
  bool overlap = true;                    // CUDA: plan step n+1 while the GPU runs step n
  // Batch-invariant kernels: a request's tokens and logprobs do not depend on the batch it
  // runs in (CUDA; the CPU backend is batch-invariant already).
  bool deterministic_inference = false;
  // "fp8": KV rows as V4's FP8 cache format stores them (model/deepseek_v4/kv_fp8.h; the CPU
  // backend so far, which rounds each row as it is written); "auto": the pools' own precision.
  std::string kv_cache_dtype = "auto";
  int cuda_device = 0;
  uint64_t kv_staging_bytes = 0;          // CUDA, > 0: exported KV waits in a device arena of this size (CUDA IPC)
  speculative::SpeculativeConfig speculative;  // CUDA: chains (mtp with an MTP layer, ngram)
  // Tensor/expert parallel (cli/rank_launch.h): the split, and where this rank's group meets
  // (rank 0 brings the rendezvous server it started before spawning the others).
  distributed::ParallelConfig parallel;
  std::string rendezvous_host = "127.0.0.1";
  int rendezvous_port = 0;
  std::shared_ptr<distributed::TcpStoreServer> rendezvous_server;
};

// The model config and checkpoint `options` name: the demo model, a checkpoint directory,
// or (synthetic_weights) that directory's config.json with random weights; num_layers
// applied.
struct ModelSource {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
};
Result<ModelSource> OpenModel(const EngineOptions& options);

// The CPU model for `options` from `source`: whole, or (comm != nullptr) this rank's shard.
Result<std::unique_ptr<HostModel>> MakeHostModel(const EngineOptions& options, ModelSource source,
                                                 distributed::Communicator* comm);

// Whether this machine can run `options.parallel`'s ranks on `options.device` (CUDA: a GPU
// per local rank, from options.cuda_device on).
Status CheckParallelDevices(const EngineOptions& options);

// Rank `rank` (> 0) of a CUDA group: its shard on its GPU, following rank 0's executor
// (DeviceExecutor::Follow) until rank 0 stops (Ok) or the group fails.
Status RunCudaRank(const EngineOptions& options, int rank);

// A started engine (its step loop running), or why it could not be built.
Result<std::unique_ptr<Engine>> MakeEngine(const EngineOptions& options);

}  // namespace peregrine::cli
