// Per-request incremental state of the DeepSeek-V4 forward on the CPU backend: everything a
// later token needs from earlier ones, so that any chunking of the prompt followed by
// single-token decode gives the same logits as one full forward.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"

namespace peregrine::deepseek_v4 {

// One compressor's running state (the attention's or the indexer's).
struct CompressorState {
  int64_t ratio = 0;
  int64_t dim = 0;    // entry width
  int64_t coff = 1;   // 2 when blocks overlap (CSA layers)
  // Rows of the unfinished block, gate rows already including `ape`.
  std::vector<float> pending_kv;    // [num_pending, coff*dim]
  std::vector<float> pending_gate;  // [num_pending, coff*dim]
  // Overlap only: the first-half rows of the last finished block (empty before the first).
  std::vector<float> previous_kv;    // [ratio, dim]
  std::vector<float> previous_gate;  // [ratio, dim]
  // Finished entries, normalised and rotated at position k*ratio.
  std::vector<float> entries;  // [num_entries, dim]

  int64_t num_pending() const { return static_cast<int64_t>(pending_kv.size()) / (coff * dim); }
  int64_t num_entries() const { return static_cast<int64_t>(entries.size()) / dim; }
};

struct LayerState {
  std::vector<float> window;     // [sliding_window, head_dim] ring, row = position % window
  CompressorState compressor;    // CSA/HCA layers
  CompressorState indexer;       // CSA layers: the indexer's keys
};

struct SequenceState {
  int64_t num_tokens = 0;  // positions already processed
  std::vector<LayerState> layers;

  static SequenceState Create(const ModelConfig& config);
};

}  // namespace peregrine::deepseek_v4
