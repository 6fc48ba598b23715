#include "model/deepseek_v4/state.h"

namespace peregrine::deepseek_v4 {

SequenceState SequenceState::Create(const ModelConfig& c) {
  SequenceState s;
  s.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerState& l = s.layers[static_cast<size_t>(i)];
    l.window.assign(static_cast<size_t>(c.sliding_window * c.head_dim), 0.0f);
    // Only CSA blocks overlap (the attention's and the indexer's compressor alike).
    const int64_t ratio = c.CompressRatio(i);
    const bool is_csa = c.layer_types[static_cast<size_t>(i)] == AttentionType::kCompressedSparse;
    if (ratio > 0) {
      l.compressor.ratio = ratio;
      l.compressor.dim = c.head_dim;
      l.compressor.coff = is_csa ? 2 : 1;
    }
    if (is_csa) {
      l.indexer.ratio = ratio;
      l.indexer.dim = c.index_head_dim;
      l.indexer.coff = 2;
    }
  }
  return s;
}

}  // namespace peregrine::deepseek_v4
