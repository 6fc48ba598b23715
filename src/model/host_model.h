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

namespace peregrine {

// KV pools in a model's host format (slots, blocks and snapshots of its KvLayout).
class HostKvPools {
 public:
  virtual ~HostKvPools() = default;
  virtual uint64_t bytes() const = 0;
};

class HostModel {
 public:
  virtual ~HostModel() = default;
  virtual const ModelConfig& config() const = 0;
  // The layout at a block size (rounded up to what the model needs).
  virtual KvLayout kv_layout(int64_t block_tokens) const = 0;
  virtual std::unique_ptr<HostKvPools> CreateKvPools(int64_t block_tokens, int32_t num_slots, int32_t num_blocks,
                                                     int32_t num_snapshots) const = 0;
  // One step: `logits` gets one [vocab] row per wanted row, in chunk order. Fails before
  // touching any state on malformed chunks (ChunkView's contract, token ids, lengths).
  virtual Status Forward(std::span<const ChunkView> chunks, HostKvPools& kv, std::vector<float>* logits) = 0;
};

class Checkpoint;

// Creates a host model from a config and its checkpoint (which it keeps alive).
using HostModelFactory =
    std::function<Result<std::unique_ptr<HostModel>>(const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint,
                                                     int num_threads)>;

// CPU model families by model_type (model/model_registry.h).
using HostModelRegistry = ModelRegistry<HostModelFactory>;

}  // namespace peregrine
