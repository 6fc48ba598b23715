#include "model/deepseek_v4/kv_geometry.h"

#include <numeric>

namespace peregrine::deepseek_v4 {

KvGeometry KvGeometry::For(const ModelConfig& c, int64_t hint, KvElementSizes sizes) {
  KvGeometry g;
  g.window = c.sliding_window;
  g.head_dim = c.head_dim;
  g.index_dim = c.index_head_dim;
  g.sizes = sizes;
  int64_t unit = std::max<int64_t>(c.sliding_window, 1);
  g.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer& l = g.layers[static_cast<size_t>(i)];
    l.type = c.layer_types[static_cast<size_t>(i)];
    l.ratio = c.CompressRatio(i);
    if (l.ratio > 0) unit = std::lcm(unit, l.ratio);
  }
  g.block_tokens = std::max<int64_t>((std::max<int64_t>(hint, 1) + unit - 1) / unit * unit, unit);
  for (Layer& l : g.layers) {
    if (l.ratio == 0) continue;
    l.entries_per_page = g.block_tokens / l.ratio;
    l.compressor_index = g.num_compressed++;
    if (l.type == AttentionType::kCompressedSparse) {
      l.coff = 2;
      l.cache_index = g.num_csa;
      l.csa_index = g.num_csa++;
    } else {
      l.cache_index = g.num_hca++;
    }
  }
  return g;
}

int64_t KvGeometry::compressor_offset(int64_t layer) const {
  int64_t at = 0;
  for (int64_t i = 0; i < layer; ++i) {
    const Layer& l = layers[static_cast<size_t>(i)];
    if (l.ratio == 0) continue;
    at += 2 * RingFloats(l.ratio, l.coff, head_dim);
    if (l.csa_index >= 0) at += 2 * RingFloats(l.ratio, 2, index_dim);
  }
  return at;
}

int64_t KvGeometry::indexer_offset(int64_t layer) const {
  const Layer& l = layers[static_cast<size_t>(layer)];
  return compressor_offset(layer) + 2 * RingFloats(l.ratio, l.coff, head_dim);
}

int64_t KvGeometry::compressor_slot_floats() const { return compressor_offset(static_cast<int64_t>(layers.size())); }

int64_t KvGeometry::snapshot_tail_floats() const {
  // CSA only (coff 2): ratio rows of 2*Dh for kv and gate, ratio rows of 2*Id for the indexer's.
  for (const Layer& l : layers)
    if (l.csa_index >= 0) return 2 * l.ratio * 2 * head_dim + 2 * l.ratio * 2 * index_dim;
  return 0;
}

KvLayout KvGeometry::Layout() const {
  KvLayout k;
  k.block_tokens = block_tokens;
  int64_t first = block_tokens;
  int64_t csa_entries = 0, csa_keys = 0, hca_entries = 0;
  for (const Layer& l : layers) {
    if (l.ratio == 0) continue;
    first = std::min(first, l.ratio);
    if (l.csa_index >= 0) {
      csa_entries += l.entries_per_page * entry_bytes();
      csa_keys += l.entries_per_page * index_dim * sizes.cache;
    } else {
      hca_entries += l.entries_per_page * entry_bytes();
    }
  }
  k.first_entry_tokens = first;
  if (csa_entries > 0) k.paged.push_back({"csa_entries", csa_entries});
  if (csa_keys > 0) k.paged.push_back({"csa_index_keys", csa_keys});
  if (hca_entries > 0) k.paged.push_back({"hca_entries", hca_entries});
  k.per_request.push_back({"window", static_cast<int64_t>(layers.size()) * window * head_dim * sizes.window});
  k.per_request.push_back({"compressor", compressor_slot_floats() * 4});
  k.snapshot_bytes = snapshot_window_bytes() + num_csa * snapshot_tail_floats() * 4;
  return k;
}

}  // namespace peregrine::deepseek_v4
