// DeviceExecutor: runs a device model's steps on one CUDA device (model/device_model.h). It
// owns the device's allocator and stream, the model, the KV pools (one allocation per kind,
// sized from a memory budget), the persistent block tables and the slots' token buffer, the
// metadata staging and its upload, the CUDA graphs of decode steps (one per batch bucket and
// tokens per sequence) and the profiler.
//
// A step: the model plans into pinned staging (two buffers alternate, so a step is planned
// while the previous one's copy may still be queued), the runtime appends the block-table
// changes, the fed tokens and the sampled-token slots, one copy uploads it all; on the stream
// follow the block-table and token scatters, the model's restores, the forward (a graph
// replay for decode buckets), the model's snapshots and the caller's logits hook.
//
// Ownership: one thread (the engine's step thread) drives an executor; all its work goes on
// its one stream.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/stream.h"
#include "base/status.h"
#include "distributed/communicator.h"
#include "model/checkpoint.h"
#include "model/device_model.h"
#include "runtime/kv_sizing.h"
#include "runtime/model_runner.h"
#include "runtime/step_message.h"
#include "speculative/draft_tree.h"

namespace peregrine {

struct ExecutorOptions {
  int device = 0;
  int64_t num_slots = 64;       // sequences with per-request state at once
  int64_t max_tokens = 2048;    // tokens per step
  int64_t max_context = 8192;   // positions per sequence
  int64_t max_logit_rows = 0;   // logits rows per step (0: num_slots)
  int64_t block_tokens = 256;
  // KV pools: blocks for kv_tokens tokens when > 0, else what gpu_memory_utilization of the
  // device leaves after the weights, the workspaces and a reserve for graphs and sampling.
  int64_t kv_tokens = 0;
  double gpu_memory_utilization = 0.9;
  bool prefix_caching = true;
  double snapshot_fraction = 0.1;
  bool batch_invariant = false;  // --enable-deterministic-inference (DeviceModelLimits)
  bool kv_cache_fp8 = false;     // --kv-cache-dtype fp8 (DeviceModelLimits)
  int64_t max_verify_rows = 0;   // speculative verify nodes per step (DeviceModelLimits)
  int32_t max_draft_steps = 0;   // > 0: the model's drafter on the device, chains this deep
  int32_t draft_candidates = 1;  // the drafter's candidates per depth (DDTree's top-k)
  DeviceWeightOptions weights;
};

// Time per op kind of a profiled step (milliseconds of GPU time, CUDA events).
struct OpProfile {
  std::string name;
  double ms = 0.0;
  int64_t launches = 0;
};

class DeviceExecutor {
 public:
  using LogitsHook = std::function<Status(const Tensor& logits, cudaStream_t stream)>;

  static Result<std::unique_ptr<DeviceExecutor>> Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                        const DeviceModelFactory& factory,
                                                        const ExecutorOptions& options);
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  const ModelConfig& config() const { return model_->config(); }
  const ExecutorOptions& options() const { return options_; }
  const KvCapacity& kv_capacity() const { return capacity_; }
  DeviceModel& model() { return *model_; }
  const DeviceModel& model() const { return *model_; }
  uint64_t weight_bytes() const { return model_->weight_bytes(); }
  // What the device's free memory dropped by when the pools were allocated.
  uint64_t kv_device_bytes() const { return kv_device_bytes_; }
  // The startup report: pools by kind, tokens and requests that fit, the device's own count.
  std::string Describe() const;
  cudaStream_t stream() const { return stream_.get(); }
  cuda::CachingAllocator& allocator() { return *allocator_; }

  // Decode steps (one token per chunk, each wanting logits) of up to `max_batch` chunks
  // replay a captured graph per power-of-two bucket, and so do speculative verify steps
  // (every chunk a draft chain of one length T: a graph per bucket and T); 0 launches every
  // step op by op.
  Status EnableGraphs(int64_t max_batch);
  // Enqueues a step and returns without waiting; `hook` gets the step's device logits
  // [R, vocab] (per chunk in order: every token's row with all_logits, else the last
  // token's when it needs logits) and enqueues what reads them. A
  // chunk with feeds_last reads its last token from its slot's entry of the token buffer.
  // Checks fail before anything is enqueued (InvalidArgument); a device failure leaves the
  // touched slots' state unusable.
  Status Launch(std::span<const ChunkView> chunks, const LogitsHook& hook);
  // Called by the hook after sampling: the step's sampled tokens (device; one per chunk that
  // needs logits, in chunk order) go to their slots' entries of the token buffer (what the
  // next step's fed chunks read).
  Status StoreSampledTokens(const int32_t* tokens, int64_t num_tokens);
  // After a step with draft chains (ChunkView::tree_parents) and before the next Launch:
  // each slot keeps its chain's first `kept` tokens (DeviceModel::EnqueueCommit). Unsharded
  // executors only.
  Status CommitTrees(std::span<const TreeCommit> commits);
  // Whether the model drafts on the device (options.max_draft_steps > 0 and a drafter in
  // the checkpoint).
  bool has_drafter() const { return model_->has_drafter(); }
  // After a step and before the next Launch: the drafter follows `inputs` over that step's
  // rows (DeviceModel::PlanDraft) and proposes num_steps greedy tokens for each input with
  // `draft`, returned row by row in `tokens` [drafting inputs * num_steps]; with
  // options.draft_candidates K > 1 and `candidates`, also each depth's K most likely tokens
  // and their logprobs (one DepthCandidates per drafting input and depth, row by row). Waits
  // for them.
  Status Draft(std::span<const DevicePairs> inputs, int32_t num_steps, std::vector<int32_t>* tokens,
               std::vector<speculative::DepthCandidates>* candidates = nullptr);
  // Runs a step and copies its logits [R, vocab] to the host.
  Status Forward(std::span<const ChunkView> chunks, std::vector<float>* logits);
  // The same step op by op with events between ops (no graph): GPU time per op kind and
  // the step's GPU wall time.
  Status ProfileForward(std::span<const ChunkView> chunks, std::vector<OpProfile>* profile, double* total_ms);
  // Host time of the last Launch from its start until the step's GPU work was enqueued.
  double last_host_ms() const { return last_host_ms_; }

  // Sharded models (options.weights.parallel.size > 1): every rank has an executor over its
  // shard; the leader (rank 0) is driven as usual and tells the others each Launch and
  // EnableGraphs over the group's communicator (runtime/step_message.h), so every rank runs
  // the same device work in the same order: its own plan of the same chunks, the model's
  // collectives, then the leader's sampled tokens broadcast into every rank's token buffer.
  // The pools hold what the rank with the least memory can hold. The other ranks call Follow.
  bool sharded() const { return comm_ != nullptr && comm_->size() > 1; }
  bool leader() const { return !sharded() || comm_->rank() == 0; }
  // A rank other than the leader: runs what the leader tells until it stops (its executor
  // destroyed: Ok) or the group fails (the error).
  Status Follow();
  // Keeps the group's communicator alive as long as the executor (destroyed after the model).
  void AdoptCommunicator(std::unique_ptr<distributed::Communicator> comm) { owned_comm_ = std::move(comm); }

 private:
  class Profiler;
  DeviceExecutor() = default;
  Status Setup(const ModelConfig& config, const Checkpoint& checkpoint, const DeviceModelFactory& factory);
  Status AllocatePools();
  // Plans the step, appends the runtime's sections, uploads, and enqueues everything before
  // the forward. `*graph_key` gets the graph bucket (0: eager).
  Status Prepare(std::span<const ChunkView> chunks, bool allow_graph, DeviceStep* step, int64_t* bucket);
  // Leader: a message to the other ranks. Others: the next one (payload words into `payload`).
  Status Publish(RankCommand command, std::span<const int32_t> payload, int32_t argument);
  Status Receive(RankCommand* command, std::vector<int32_t>* payload, int32_t* argument);
  // Sharded: the ranks' pools shrunk to the smallest rank's capacity.
  Status AgreeOnCapacity();

  std::unique_ptr<distributed::Communicator> owned_comm_;  // first: outlives everything below
  distributed::Communicator* comm_ = nullptr;               // options_.weights.parallel.comm
  ExecutorOptions options_;
  int num_sms_ = 0;
  cuda::CudaRawAllocator raw_;
  std::unique_ptr<cuda::CachingAllocator> allocator_;
  cuda::Stream stream_;
  std::unique_ptr<DeviceModel> model_;
  KvCapacity capacity_;
  uint64_t kv_device_bytes_ = 0;
  std::vector<cuda::DeviceBuffer> pools_;     // paged kinds, per-request kinds, snapshots
  cuda::DeviceBuffer block_tables_;           // [num_slots, max_blocks] i32
  int64_t max_blocks_ = 0;
  std::vector<int32_t> tables_;               // host mirror of block_tables_ as of the last launch
  cuda::DeviceBuffer slot_tokens_;            // [num_slots] i32: each slot's newest sampled token
  // Metadata: pinned staging (two alternate) and its device copy.
  std::array<cuda::PinnedHostBuffer, 2> meta_host_;
  std::array<cuda::Event, 2> meta_copied_;
  int meta_turn_ = 0;
  cuda::DeviceBuffer meta_;
  int64_t meta_capacity_ = 0;
  // The drafter's metadata (its own: the step's stays valid for its graphs).
  cuda::PinnedHostBuffer draft_meta_host_, draft_tokens_host_, draft_cand_tokens_host_, draft_cand_logprobs_host_;
  cuda::DeviceBuffer draft_meta_;
  // The last launch's sampled-token slots: [R, 2] (slot, row) in the metadata.
  int64_t store_pairs_ = 0, num_store_pairs_ = 0;
  std::map<std::pair<int64_t, int64_t>, cuda::Graph> graphs_;  // by (bucket, tokens per chunk)
  // The drafter's graphs by shape (first step's rows, chain steps' rows, steps).
  std::map<std::tuple<int64_t, int64_t, int32_t>, cuda::Graph> draft_graphs_;
  cuda::DeviceBuffer message_;                // sharded: the rank messages' device copy
  int64_t graph_max_batch_ = 0;
  double last_host_ms_ = 0.0;
};

}  // namespace peregrine
