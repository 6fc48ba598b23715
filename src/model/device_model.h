// What the CUDA runtime needs from a model (runtime/device_executor.h runs it; a model
// family registers a factory by model_type): its KV layout on the device, the binding of the
// pools the runtime allocated, the host plan of a step into the runtime's metadata staging,
// and the enqueue of the planned step (replayed as a CUDA graph for decode buckets). The
// runtime owns the stream, the staging and its upload, the graphs, the profiler, the pools,
// the block tables and the token buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "config/model_config.h"
#include "model/kv_layout.h"
#include "model/model_registry.h"
#include "model/step_view.h"

namespace peregrine {

namespace cuda {
class CachingAllocator;
}  // namespace cuda

// A step's metadata: int32 sections the model (then the runtime) places in pinned staging,
// copied to `device` in one upload before the step runs.
class StepMeta {
 public:
  StepMeta(int32_t* host, int32_t* device, int64_t capacity) : host_(host), device_(device), capacity_(capacity) {}
  // Reserves `count` int32s, 16-byte aligned; the offset, or -1 when the buffer is full.
  int64_t Place(int64_t count) {
    const int64_t offset = size_;
    const int64_t end = offset + (count + 3) / 4 * 4;
    if (count < 0 || end > capacity_) return -1;
    size_ = end;
    return offset;
  }
  int32_t* host(int64_t offset) const { return host_ + offset; }
  int32_t* device(int64_t offset) const { return device_ + offset; }
  Tensor DeviceView(int64_t offset, Shape shape) const {
    return Tensor::Contiguous(device_ + offset, DType::kI32, shape, Device::kCuda);
  }
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }

 private:
  int32_t* host_;
  int32_t* device_;
  int64_t capacity_;
  int64_t size_ = 0;
};

// What a planned step is, for the runtime.
struct DeviceStep {
  int64_t rows = 0;              // token rows the device runs (a graph bucket pads them)
  int64_t num_chunks = 0;
  int64_t logit_rows = 0;        // logits rows it computes, in chunk order
  int64_t token_ids_offset = 0;  // the metadata section of the rows' token ids [rows] (fed tokens land there)
  int64_t max_chunk_tokens = 0;
};

// Times the ops of a profiled step (the runtime's; null when not profiling).
class OpProfiler {
 public:
  virtual ~OpProfiler() = default;
  virtual Status Run(int kind, const std::function<Status()>& op) = 0;
};

// The pools the runtime allocated for the model's KvLayout, in layout order, and the
// persistent block tables [num_slots, max_blocks] every step's chunks address through their
// slot.
struct DeviceKvPools {
  std::vector<void*> paged;         // kind k: num_blocks * bytes + fixed_bytes
  std::vector<void*> per_request;   // kind k: num_slots * bytes + fixed_bytes
  void* snapshots = nullptr;        // num_snapshots * snapshot_bytes
  int32_t num_slots = 0, num_blocks = 0, num_snapshots = 0;
  int32_t* block_tables = nullptr;  // [num_slots, max_blocks]
  int64_t max_blocks = 0;
};

// Shape limits a device model is built for.
struct DeviceModelLimits {
  int device = 0;
  int num_sms = 0;
  int64_t max_tokens = 2048;     // token rows per step
  int64_t max_logit_rows = 64;   // logits rows per step
  int64_t max_context = 8192;    // positions per sequence
  int64_t block_tokens = 256;    // KV block size (rounded up to what the model needs)
  // --enable-deterministic-inference: every kernel sums in an order that does not depend on
  // the batch (its size, its other rows, how prefill is chunked), so a request's tokens and
  // logprobs are the same alone or in any batch. Costs speed (see the profile).
  bool batch_invariant = false;
  // --kv-cache-dtype fp8: compressed entries stored as V4's FP8 rows (kernels/common/kv_fp8_row.h)
  // and every KV row (window rows too) rounded through that format as it is written, so
  // attention reads what an FP8 cache gives back (the CPU backend's kv_cache_fp8).
  bool kv_cache_fp8 = false;
  // Speculative verify: draft-tree nodes a step may hold (each has staging rows for what it
  // would write); 0: the model verifies no drafts.
  int64_t max_verify_rows = 0;
  // The deepest draft-tree node below its root a verify step may hold.
  int32_t max_tree_depth = 16;
  // Speculative drafting on the device (the checkpoint's MTP layer, or its block drafter, which
  // drafts at most one block): up to this deep; 0: no drafter is loaded.
  int32_t max_draft_steps = 0;
  // The drafter's candidates per depth (DDTree's top-k, at most kDraftMaxCandidates = 16);
  // 1: its greedy chain alone.
  int32_t draft_candidates = 1;
};

// A drafter's input for one slot after a step (DeviceModel::PlanDraft; host_model.h's
// DraftInput on the device). Pair j is (the final streams of step row rows[j], next[j], the
// token after that row) at the drafter position first_position + j; a row of -1 reads the
// streams the slot kept pending from an earlier call (its successor was unknown then).
// pending_row >= 0 keeps that row's streams for the slot's next call. `restart` starts the
// slot's drafter over at first_position (a new sequence, or one whose state it did not
// follow). `draft`: propose num_steps tokens after the last pair.
struct DevicePairs {
  int32_t slot = 0;
  int64_t first_position = 0;
  std::span<const int32_t> rows;
  std::span<const int32_t> next;
  int32_t pending_row = -1;
  bool restart = false;
  bool draft = false;
};

// What a speculative verify keeps (DeviceModel::EnqueueCommit): one root path of the draft
// tree the last step ran in `slot`, as node indices (the root 0, then the accepted drafts,
// each the child of the one before).
struct TreeCommit {
  int32_t slot = 0;
  std::vector<int32_t> nodes;
};

// A contiguous piece of device memory (a KV page is a list of them).
struct DeviceRegion {
  void* data = nullptr;
  size_t bytes = 0;
};

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual uint64_t weight_bytes() const = 0;
  // The KV kinds with this device's element sizes (fixed_bytes included).
  virtual KvLayout kv_layout() const = 0;
  // Before the first step; the pools outlive the model's use of them.
  virtual Status BindKv(const DeviceKvPools& pools) = 0;
  // Int32s of metadata a step of up to `rows` rows and `chunks` chunks can need.
  virtual int64_t meta_capacity(int64_t rows, int64_t chunks) const = 0;
  // Host: checks the chunks (InvalidArgument, nothing touched) and writes the step's
  // metadata for `rows` >= its tokens rows; rows past the tokens are padding that every
  // kernel skips. Sections sit at offsets that depend only on `rows` and the chunks' common
  // length when all chunks have one (graph buckets replay on any such step).
  virtual Result<DeviceStep> Plan(std::span<const ChunkView> chunks, int64_t rows, StepMeta& meta) = 0;
  // Device, before the forward and outside graphs: restores of slots from snapshots.
  virtual Status EnqueueRestores(std::span<const ChunkView> chunks, cudaStream_t stream) = 0;
  // Device: the planned forward (captured once per graph bucket, then replayed).
  virtual Status Enqueue(const DeviceStep& step, const StepMeta& meta, cudaStream_t stream, OpProfiler* profiler) = 0;
  // Device, after the forward and outside graphs: the snapshots the chunks write that the
  // forward did not (per-request state left in the step's buffers).
  virtual Status EnqueueSnapshots(std::span<const ChunkView> chunks, const DeviceStep& step, cudaStream_t stream) = 0;
  // Device, after a step with draft trees (ChunkView::tree_parents) and before the next
  // step: each commit's slot keeps the tree's root path `nodes` as if only those tokens had
  // run; every tree of the step needs one. A tree without its commit leaves its slot
  // unusable. InvalidArgument (nothing enqueued) for slots the last step did not verify or a
  // list of nodes that is not a root path.
  virtual Status EnqueueCommit(std::span<const TreeCommit> /*commits*/, cudaStream_t /*stream*/) {
    return Unimplemented("this model cannot verify draft trees");
  }
  // Speculative drafting (limits.max_draft_steps > 0 and a drafter in the checkpoint). After
  // a step was enqueued and before the next one: PlanDraft checks the inputs (InvalidArgument,
  // nothing changed) and writes the drafter's steps into `meta` (capacity:
  // draft_meta_capacity); EnqueueDraft runs them (capture-safe: its work depends on the
  // DraftShape alone), leaving for the i-th input with `draft` its tokens in row i of
  // draft_tokens() [slots, max_draft_steps] i32 (greedy chains).
  virtual bool has_drafter() const { return false; }
  virtual int64_t draft_meta_capacity() const { return 0; }
  // The planned draft's shape: its device work depends on these alone (the runtime replays
  // one CUDA graph per shape), num_drafting on the inputs.
  struct DraftShape {
    int64_t num_drafting = 0;  // inputs with `draft`: rows of draft_tokens()
    int64_t rows = 0;          // the first drafter step's rows (0: nothing to run)
    int64_t drafting_rows = 0; // the chain steps' rows (num_drafting padded)
    int32_t num_steps = 0;
  };
  virtual Result<DraftShape> PlanDraft(std::span<const DevicePairs> /*inputs*/, int32_t /*num_steps*/,
                                       StepMeta& /*meta*/) {
    return Unimplemented("this model has no drafter on the device");
  }
  virtual Status EnqueueDraft(const StepMeta& /*meta*/, cudaStream_t /*stream*/) {
    return Unimplemented("this model has no drafter on the device");
  }
  virtual Tensor draft_tokens() const { return {}; }
  // With limits.draft_candidates K > 1: each depth's K most likely tokens of the drafter's
  // distribution and their logprobs, [slots, max_draft_steps, K] i32 / f32, rows as in
  // draft_tokens() (the greedy token first: the chain follows it).
  virtual Tensor draft_candidate_tokens() const { return {}; }
  virtual Tensor draft_candidate_logprobs() const { return {}; }
  // The last step's logits [logit_rows, vocab] f32 on the device (valid until the next step).
  virtual Tensor logits(int64_t rows) const = 0;
  // Names of the op kinds OpProfiler::Run receives, in print order.
  virtual std::vector<std::string> op_kinds() const = 0;
  // Disaggregation (ModelRunner::ExportKv): where a slot's per-request state and a block's
  // entries lie, in page order (empty: this model cannot move its KV).
  virtual std::vector<DeviceRegion> SlotRegions(int32_t /*slot*/) const { return {}; }
  virtual std::vector<DeviceRegion> BlockRegions(int32_t /*block*/) const { return {}; }
};

class Checkpoint;

// How weights come to the device (families read the formats they support).
namespace distributed {
class Communicator;
}  // namespace distributed

// This rank's part of a tensor/expert-parallel group: which part of the weights it holds and
// the group its sub-layer outputs are summed over (collectives enqueued on the step's stream,
// inside its graphs). size 1: the whole model, no group.
struct DeviceParallel {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
  distributed::Communicator* comm = nullptr;  // required when size > 1; outlives the model
};

struct DeviceWeightOptions {
  bool synthetic = false;         // generate every matrix on the device
  uint64_t seed = 0;
  std::string expert_format = "bf16";  // routed experts
  std::string dense_format = "bf16";   // dense projections
  // Called on the loading thread after each part (a layer, the embeddings): parts done of
  // `total`, bytes on the device so far. Empty: no reports.
  std::function<void(int64_t done, int64_t total, uint64_t bytes)> on_progress;
  DeviceParallel parallel;
};

// Creates a device model: its weights loaded (or generated) through `allocator` on
// `stream`, every step buffer allocated for `limits`.
using DeviceModelFactory = std::function<Result<std::unique_ptr<DeviceModel>>(
    const ModelConfig& config, const Checkpoint& checkpoint, const DeviceModelLimits& limits,
    const DeviceWeightOptions& weights, cuda::CachingAllocator& allocator, cudaStream_t stream)>;

// CUDA model families by model_type (model/model_registry.h).
using DeviceModelRegistry = ModelRegistry<DeviceModelFactory>;

}  // namespace peregrine
