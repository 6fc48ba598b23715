// Where DeepSeek-V4 keeps its KV state, shared by the CPU and CUDA backends (which differ
// only in element sizes): what KvLayout declares and where each layer's part of each pool
// lies. Host code only.
//
// Pools (each one allocation, layer-major inside, so a layer's part is contiguous):
//   paged, one page per block of `block_tokens` tokens (block id p):
//     csa_entries     [num_csa][num_blocks][block/ratio_csa][Dh]   compressed entries (CSA)
//     csa_index_keys  [num_csa][num_blocks][block/ratio_csa][Id]   indexer keys (CSA)
//     hca_entries     [num_hca][num_blocks][block/ratio_hca][Dh]   compressed entries (HCA)
//   per request (slot s):
//     window          [num_layers][num_slots * W + extra_rows][Dh]  the ring of the last W rows
//                     (position q at row s*W + q % W); the CUDA backend puts a step's new rows
//                     after the rings (extra_rows = its max tokens per step)
//     compressor      per compressed layer: kv ring + gate ring [num_slots][coff*ratio][coff*Dc]
//                     f32 (row layout of kernels/compressor_step.cuh), CSA layers then also the
//                     indexer's two rings
//   snapshot (prefix caching), the per-request state at a block boundary L:
//     window rows of positions [L - W, L) for every layer (ring order, as L % W == 0), then
//     per CSA layer the rows of the block that ends at L of its compressor's and indexer's
//     kv and gate rings (what the overlap of the next entry reads); HCA rings are empty at L.
// The block size is a multiple of W and of both ratios, so every boundary is a block, window
// and compressor boundary at once.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "model/kv_layout.h"

namespace peregrine::deepseek_v4 {

struct KvElementSizes {
  int64_t cache = 4;   // compressed entries and indexer keys
  int64_t window = 4;  // window rows
  // Bytes of one compressed entry when they are stored in another format than `cache`-sized
  // values (the CUDA backend's FP8 entries: kernels/common/kv_fp8_row.h); 0: head_dim * cache.
  int64_t entry_row = 0;
};

struct KvGeometry {
  // Per layer: its ratio (0: window only), overlap factor and where its parts sit.
  struct Layer {
    AttentionType type = AttentionType::kSliding;
    int64_t ratio = 0;
    int64_t coff = 1;
    int64_t entries_per_page = 0;  // block / ratio
    int64_t cache_index = -1;      // among the layers of its paged kind (CSA or HCA)
    int64_t compressor_index = -1; // among the compressed layers
    int64_t csa_index = -1;        // among the CSA layers (indexer keys, snapshot tails)
  };

  int64_t block_tokens = 0;
  int64_t window = 0;
  int64_t head_dim = 0;
  int64_t index_dim = 0;
  std::vector<Layer> layers;
  int64_t num_csa = 0, num_hca = 0, num_compressed = 0;
  KvElementSizes sizes;

  // `block_tokens_hint` is rounded up to a multiple of W and the compress ratios.
  static KvGeometry For(const ModelConfig& config, int64_t block_tokens_hint, KvElementSizes sizes);

  KvLayout Layout() const;
  // Bytes of one compressed entry (CSA and HCA alike).
  int64_t entry_bytes() const { return sizes.entry_row > 0 ? sizes.entry_row : head_dim * sizes.cache; }
  // Floats of one slot's compressor rings of layer l (kv, then gate; then the indexer's for CSA).
  int64_t RingFloats(int64_t ratio, int64_t coff, int64_t dim) const { return coff * ratio * coff * dim; }
  int64_t compressor_slot_floats() const;  // all compressed layers, one slot
  // Offsets (floats) of layer l's rings inside one slot's compressor region.
  int64_t compressor_offset(int64_t layer) const;
  int64_t indexer_offset(int64_t layer) const;
  // Snapshot parts: window rows of every layer, then per CSA layer four tails of ratio rows.
  int64_t snapshot_window_bytes() const { return static_cast<int64_t>(layers.size()) * window * head_dim * sizes.window; }
  int64_t snapshot_tail_floats() const;  // one CSA layer: kv + gate of compressor and indexer
};

}  // namespace peregrine::deepseek_v4
