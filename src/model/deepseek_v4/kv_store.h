// The CPU backend's KV pools for DeepSeek-V4 (kv_geometry.h has the layout): per-request
// slots (window rings, compressor rings), blocks of compressed entries and indexer keys, and
// block-boundary snapshots, all f32. The runtime sizes it; the forward reads and writes it
// through slot, block and snapshot ids.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "config/model_config.h"
#include "model/deepseek_v4/kv_geometry.h"
#include "model/host_model.h"

namespace peregrine::deepseek_v4 {

class CpuKvStore final : public HostKvPools {
 public:
  CpuKvStore(const KvGeometry& geometry, int32_t num_slots, int32_t num_blocks, int32_t num_snapshots);

  const KvGeometry& geometry() const { return g_; }
  int32_t num_slots() const { return num_slots_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_snapshots() const { return num_snapshots_; }
  uint64_t bytes() const override;
  // Pages in f32: the slot page holds every layer's window ring and the slot's compressor
  // region; a block page holds, layer by layer, its compressed entries (and index keys).
  Status ExportPages(int32_t slot, std::span<const int32_t> blocks, std::vector<std::vector<uint8_t>>* pages) override;
  Status ImportPages(int32_t slot, std::span<const int32_t> blocks, std::span<const std::vector<uint8_t>> pages) override;

  float* Window(int64_t layer, int32_t slot);  // [W, Dh], position q at row q % W
  // The layer's compressor rings [coff*ratio, coff*Dh] (kv, gate), and for CSA layers the
  // indexer's [2*ratio, 2*Id].
  float* CompressorKv(int64_t layer, int32_t slot);
  float* CompressorGate(int64_t layer, int32_t slot);
  float* IndexerKv(int64_t layer, int32_t slot);
  float* IndexerGate(int64_t layer, int32_t slot);
  // Compressed entry k of a compressed layer (its index key for CSA) through a block table.
  float* Entry(int64_t layer, std::span<const int32_t> blocks, int64_t k);
  float* IndexKey(int64_t layer, std::span<const int32_t> blocks, int64_t k);

  // Writes the slot's state at block boundary `boundary` (a position) into a snapshot: the
  // window ring of `layer`, and for CSA layers the compressor and indexer rows of the block
  // that ends there. Called per layer as the forward passes the boundary.
  void WriteSnapshot(int64_t layer, int32_t slot, int32_t snapshot, int64_t boundary);
  // Starts a slot from a snapshot taken at `boundary` (every layer).
  void Restore(int32_t slot, int32_t snapshot, int64_t boundary);

  // A draft tree's verify forward (speculative decoding) writes nothing of the slot's state:
  // each layer stages every node's inputs to the state here, and CommitTree replays one
  // root path of them (model.h). Per layer, per node: its window row, its compressor and
  // indexer projections, and the entry and index key it completes (when it completes one).
  struct StagedLayer {
    std::vector<float> kv, ckv, cgate, ikv, igate, entry, key;
  };
  struct StagedTree {
    int64_t first_position = -1;          // the root's; -1: nothing staged
    std::vector<int32_t> parents;         // [nodes], -1 for the root
    std::vector<int32_t> snapshots;       // per block boundary the deepest node could reach
    std::vector<StagedLayer> layers;
  };
  StagedTree& Staged(int32_t slot);

  // The drafter's state (the checkpoint's MTP layer) per slot: window rings in a store of its
  // own (created on first use with `geometry`, the MTP layer's), the positions it has run
  // ([floor, next)), and the hidden state of position `next` while its successor is unknown.
  struct DrafterSlot {
    int64_t floor = 0;
    int64_t next = 0;
    std::vector<float> pending;  // [hc, D]; empty: none
  };
  CpuKvStore& DrafterStore(const KvGeometry& geometry);
  DrafterSlot& Drafter(int32_t slot);

 private:
  // The f32 regions of a slot page and of a block page, in page order.
  std::vector<std::span<float>> SlotRegions(int32_t slot);
  std::vector<std::span<float>> BlockRegions(int32_t block);
  float* SnapshotWindow(int32_t snapshot, int64_t layer);
  float* SnapshotTail(int32_t snapshot, int64_t layer);  // [4 tails of ratio rows]

  // Uninitialised storage: every row is written before it is read (pages stay untouched,
  // and out of the resident set, until a request reaches them).
  struct Floats {
    std::unique_ptr<float[]> p;
    size_t n = 0;
    void assign(size_t count) {
      p = std::make_unique_for_overwrite<float[]>(count);
      n = count;
    }
    float* data() { return p.get(); }
    size_t size() const { return n; }
  };

  KvGeometry g_;
  int32_t num_slots_, num_blocks_, num_snapshots_;
  int64_t slot_compressor_floats_ = 0, snapshot_floats_ = 0;
  Floats window_;       // [layers][slots][W][Dh]
  Floats compressor_;   // [slots][compressor_slot_floats]
  Floats csa_entries_;  // [csa layers][blocks][P4][Dh]
  Floats csa_keys_;     // [csa layers][blocks][P4][Id]
  Floats hca_entries_;  // [hca layers][blocks][P128][Dh]
  Floats snapshots_;    // [snapshots][layers * W * Dh + csa layers * tail]
  std::vector<StagedTree> staged_;  // [slots], sized when a slot first verifies a tree
  std::unique_ptr<CpuKvStore> drafter_store_;
  std::vector<DrafterSlot> drafter_slots_;
};

// One sequence on a store of its own, with blocks for max_position_embeddings tokens (tests
// and `peregrine generate`, which run sequences outside an engine).
struct SequenceState {
  int64_t num_tokens = 0;
  std::unique_ptr<CpuKvStore> kv;
  std::vector<int32_t> blocks;

  static SequenceState Create(const ModelConfig& config);
};

// The block size the CPU backend uses unless told otherwise (tokens per block).
inline constexpr int64_t kDefaultBlockTokens = 256;

}  // namespace peregrine::deepseek_v4
