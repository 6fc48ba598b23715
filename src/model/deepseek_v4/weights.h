// DeepSeek-V4 weights as the CPU backend uses them: fp32 host tensors under the canonical
// names of model/checkpoint.h, checked against the config's shapes at load.
#pragma once

#include <optional>
#include <vector>

#include "config/model_config.h"
#include "model/checkpoint.h"

namespace peregrine::deepseek_v4 {

// mHC mixer of one sub-layer: fn [(2+hc)*hc, hc*D], base [(2+hc)*hc], scale [3].
// The final head mixer has fn [hc, hc*D], base [hc], scale [1].
struct HyperConnectionWeights {
  HostTensor fn, base, scale;
};

// A compressor (overlapping on CSA layers, plain on HCA layers) producing `dim`-wide entries.
// coff = 2 when overlapping: the projections carry [previous-block half | current half].
struct CompressorWeights {
  int64_t ratio = 0;
  int64_t dim = 0;
  int64_t coff = 1;
  HostTensor wkv;    // [coff*dim, D]
  HostTensor wgate;  // [coff*dim, D]
  HostTensor ape;    // [ratio, coff*dim]  learned position bias inside a block
  HostTensor norm;   // [dim]
};

struct IndexerWeights {
  HostTensor wq_b;          // [IH*Id, q_lora]
  HostTensor weights_proj;  // [IH, D]
  CompressorWeights compressor;
};

struct AttentionWeights {
  HostTensor wq_a;    // [q_lora, D]
  HostTensor q_norm;  // [q_lora]
  HostTensor wq_b;    // [H*Dh, q_lora]
  HostTensor wkv;     // [Dh, D]
  HostTensor kv_norm; // [Dh]
  HostTensor wo_a;    // [G*o_lora, H*Dh/G]
  HostTensor wo_b;    // [D, G*o_lora]
  HostTensor sink;    // [H]
  std::optional<CompressorWeights> compressor;  // CSA and HCA layers
  std::optional<IndexerWeights> indexer;        // CSA layers
};

struct ExpertWeights {
  HostTensor w1;  // gate [I, D]
  HostTensor w2;  // down [D, I]
  HostTensor w3;  // up   [I, D]
};

struct MoeWeights {
  HostTensor gate;     // [E, D]
  HostTensor bias;     // [E] selection bias (learned routing only)
  HostTensor tid2eid;  // [vocab, K] i64 (hash routing only)
  std::vector<ExpertWeights> experts;  // [E]
  ExpertWeights shared;
};

struct LayerWeights {
  HostTensor attn_norm, ffn_norm;  // [D]
  HyperConnectionWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

// A multi-token-prediction layer (`mtp.N.*`): e = e_proj(enorm(embed(next token))), each of the
// main model's streams h_proj(hnorm(stream)) + e, one window-attention decoder layer with
// learned routing, its own head mixer and norm; the main model's embedding and head.
struct MtpWeights {
  HostTensor enorm, hnorm, norm;  // [D]
  HostTensor e_proj, h_proj;      // [D, D]
  HyperConnectionWeights hc_head;
  LayerWeights layer;
};

// DSpark's block drafter (`mtp.0` .. `mtp.S-1`, docs/decisions/0005-block-drafter-format.md):
// main_x = main_norm(main_proj(the target's lane-averaged streams at the target layers,
// concatenated)); S window-attention decoder stages with learned routing; the last stage's
// head mixer and norm, the target's head; a Markov correction of each block position's logits
// by the token before it (markov_w2 . markov_w1[token]) and a confidence per position from
// [hidden, markov_w1[token]].
struct BlockDrafterWeights {
  HostTensor main_proj;              // [D, taps * D]
  HostTensor main_norm;              // [D]
  std::vector<LayerWeights> stages;  // [S]
  HyperConnectionWeights hc_head;
  HostTensor norm;                   // [D]
  HostTensor markov_w1, markov_w2;   // [vocab, rank]
  HostTensor confidence;             // [1, D + rank]
};

struct ModelWeights {
  HostTensor embed;  // [vocab, D]
  HostTensor head;   // [vocab, D]
  HostTensor norm;   // [D]
  HyperConnectionWeights hc_head;
  std::vector<LayerWeights> layers;
  // num_nextn_predict_layers of them when the checkpoint stores them (`mtp.0.e_proj.weight`),
  // else none.
  std::vector<MtpWeights> mtp;
  // When the config has dspark keys and the checkpoint `mtp.0.main_proj.weight`.
  std::optional<BlockDrafterWeights> block_drafter;
};

// Which part of the model one rank holds (distributed/parallel_config.h). Rank r of `size`:
// query heads [r, r + 1) * H / size with their wq_b rows and sinks, and the output-projection
// groups they fall in (whole groups when G % size == 0, one group's part when size % G == 0)
// with those wo_a rows (its heads' columns) and wo_b columns; the shared expert's intermediate slice (w1/w3 rows, w2
// columns); the routed experts' intermediate slice the same way, or with `expert_parallel`
// whole experts [r, r + 1) * E / size (the others stay empty); head rows PaddedShard(vocab).
// Everything else (embedding, norms, mHC, the shared KV head, compressors, indexer, router) is
// whole on every rank, so each rank's sub-layer output is a partial sum over the ranks.
struct ShardSpec {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
  bool is_whole() const { return size == 1; }
};

// Whether `config` splits as `shard` asks (the dimensions each rank divides); says which does not.
Status ValidateShard(const ModelConfig& config, const ShardSpec& shard);

// The config of an MTP layer seen as a one-layer model: window-only attention, learned routing.
ModelConfig MtpLayerConfig(const ModelConfig& config);
// The block drafter's stages seen as a model of num_nextn_predict_layers such layers.
ModelConfig BlockDrafterConfig(const ModelConfig& config);

// Reads and shape-checks every tensor the config implies, keeping this rank's part of the
// split ones (row slices borrow, column slices copy). Errors name the tensor.
Result<ModelWeights> LoadWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                 const ShardSpec& shard = {});

}  // namespace peregrine::deepseek_v4
