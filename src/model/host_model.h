// What the CPU runtime needs from a model (model/model_registry.h creates one by
// model_type): its KV layout, pools in its own format, and a batched forward over a step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <span>
#include <vector>

#include "base/status.h"
#include "config/model_config.h"
#include "model/kv_layout.h"
#include "model/model_registry.h"
#include "model/step_view.h"
#include "speculative/draft_tree.h"

namespace peregrine {

// KV pools in a model's host format (slots, blocks and snapshots of its KvLayout).
class HostKvPools {
 public:
  virtual ~HostKvPools() = default;
  virtual uint64_t bytes() const = 0;
  // Disaggregated serving (ModelRunner::ExportKv): a slot's per-request state as one page and
  // the given blocks' pages after it; and the reverse, checking every page's size.
  virtual Status ExportPages(int32_t /*slot*/, std::span<const int32_t> /*blocks*/,
                             std::vector<std::vector<uint8_t>>* /*pages*/) {
    return Unimplemented("these KV pools cannot export pages");
  }
  virtual Status ImportPages(int32_t /*slot*/, std::span<const int32_t> /*blocks*/,
                             std::span<const std::vector<uint8_t>> /*pages*/) {
    return Unimplemented("these KV pools cannot import pages");
  }
};

// A drafter's input for one slot after a step (HostModel::Draft): the step rows whose
// final hidden states are now committed, at positions first_position + i, and the tokens at
// those positions followed by the next one when it is known (tokens.size() is rows.size()
// + 1, or rows.size() when the last row's successor is still unknown: the drafter keeps
// that row until the slot's next call). num_steps > 0 asks for that many draft positions
// after the last known token, top_k candidates each (needs the successor).
struct DraftInput {
  int32_t slot = 0;
  int64_t first_position = 0;
  std::span<const int32_t> rows;
  std::span<const int32_t> tokens;
  int32_t num_steps = 0;
  int32_t top_k = 1;
  bool restart = false;  // the slot holds a new sequence, or its sequence started over here
};

class HostModel {
 public:
  virtual ~HostModel() = default;
  virtual const ModelConfig& config() const = 0;
  // The layout at a block size (rounded up to what the model needs).
  virtual KvLayout kv_layout(int64_t block_tokens) const = 0;
  // The values the pools hold, for the KV fingerprint (disaggregation refuses to mix formats).
  virtual std::string kv_format() const { return "f32"; }
  virtual std::unique_ptr<HostKvPools> CreateKvPools(int64_t block_tokens, int32_t num_slots, int32_t num_blocks,
                                                     int32_t num_snapshots) const = 0;
  // One step: `logits` gets one [vocab] row per wanted row, in chunk order. Fails before
  // touching any state on malformed chunks (ChunkView's contract, token ids, lengths).
  virtual Status Forward(std::span<const ChunkView> chunks, HostKvPools& kv, std::vector<float>* logits) = 0;

  // Speculative decoding. CommitTree keeps one root path of the draft tree the last step
  // verified in `slot` (path[0] = 0, each node the child of the one before): the slot's state
  // becomes the state after those tokens, with the boundaries they reach snapshotted.
  virtual Status CommitTree(HostKvPools& /*kv*/, int32_t /*slot*/, std::span<const int32_t> /*blocks*/,
                            std::span<const int32_t> /*path*/) {
    return Unimplemented("this model cannot verify draft trees");
  }
  // Ok while the model can run; a model split over ranks whose group broke (a rank died)
  // reports why, for good.
  virtual Status health() const { return Status::Ok(); }
  // Whether Draft works (a drafter in the checkpoint: MTP layers or a block drafter).
  virtual bool has_drafter() const { return false; }
  // Extends each slot's drafter state over the rows of the last step (whose chunks had
  // keep_hidden) and proposes candidates per draft position: out[i] gets inputs[i].num_steps
  // entries, or fewer where the drafter reaches less far (a block drafter: its block size).
  // A slot's drafter state starts over with a chunk at first_position 0 or a restore.
  virtual Status Draft(HostKvPools& /*kv*/, std::span<const DraftInput> /*inputs*/,
                       std::vector<std::vector<speculative::DepthCandidates>>* /*out*/) {
    return Unimplemented("this model has no drafter");
  }
};

class Checkpoint;
namespace distributed {
class Communicator;
}

// How a host model is made: threads, and for a model split over ranks (tensor parallel over
// comm->size() ranks, this one comm->rank(); routed experts partitioned with
// expert_parallel) the group, which must outlive the model. comm == nullptr: the whole model.
struct HostModelOptions {
  int num_threads = 2;
  distributed::Communicator* comm = nullptr;
  bool expert_parallel = false;
  bool kv_cache_fp8 = false;  // KV rows as an FP8 cache gives them back (--kv-cache-dtype fp8)
};

// Creates a host model from a config and its checkpoint (which it keeps alive).
using HostModelFactory = std::function<Result<std::unique_ptr<HostModel>>(
    const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint, const HostModelOptions& options)>;

// CPU model families by model_type (model/model_registry.h).
using HostModelRegistry = ModelRegistry<HostModelFactory>;

}  // namespace peregrine
