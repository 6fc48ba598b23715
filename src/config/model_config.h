// The typed DeepSeek-V4 model config, parsed and validated once from config.json.
// Both dialects are accepted: HF transformers' (`layer_types`, `mlp_layer_types`,
// `compress_rates`, nested `rope_parameters`) and the official release's / legacy keys
// (`compress_ratios`, `num_hash_layers`, `rope_scaling`, `qk_rope_head_dim`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace peregrine {

enum class AttentionType : uint8_t {
  kSliding,            // window only (compress ratio 0)
  kCompressedSparse,   // window + ratio-4 compressed entries picked by the indexer (CSA)
  kHeavilyCompressed,  // window + all ratio-128 compressed entries (HCA)
};

enum class MoeType : uint8_t {
  kHash,     // experts from tid2eid[token_id]
  kLearned,  // top-k of score + selection bias
};

// One RoPE table. `yarn` blends interpolated and extrapolated frequencies as HF's
// `_compute_yarn_parameters` does (truncated correction range); cos/sin are multiplied by
// `attention_factor` (1.0 for V4).
struct RopeConfig {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;

  bool operator==(const RopeConfig&) const = default;
};

struct ModelConfig {
  std::string model_type = "deepseek_v4";  // selects the model's implementation (model/model_registry.h)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;       // shared K=V dim (512 in V4-Flash)
  int64_t rope_head_dim = 0;  // trailing RoPE dims of each head (64)
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  int64_t max_position_embeddings = 0;

  std::vector<AttentionType> layer_types;  // [num_layers]
  std::vector<MoeType> mlp_layer_types;    // [num_layers]
  int64_t compress_ratio_csa = 4;
  int64_t compress_ratio_hca = 128;

  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t num_shared_experts = 1;
  int64_t moe_intermediate_size = 0;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  double swiglu_limit = 0.0;  // 0 disables the clamp

  int64_t hc_mult = 1;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;

  RopeConfig rope_main;      // sliding-window layers
  RopeConfig rope_compress;  // CSA / HCA layers

  int64_t bos_token_id = 0;            // -1 when config.json says null
  std::vector<int64_t> eos_token_ids;  // empty when config.json says null
  int64_t num_nextn_predict_layers = 0;

  // DSpark's block drafter (docs/decisions/0005-block-drafter-format.md), when
  // `dspark_block_size` is set: the num_nextn_predict_layers stages under `mtp.` draft a block
  // of this many tokens in one forward from the target's residual streams at the listed
  // layers; the block's positions after the first hold the noise token.
  int64_t dspark_block_size = 0;  // 0: no block drafter
  int64_t dspark_noise_token_id = 0;
  std::vector<int64_t> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  bool has_block_drafter() const { return dspark_block_size > 0; }

  // 0 for sliding layers, else the layer's compression ratio.
  int64_t CompressRatio(int64_t layer) const;
  const RopeConfig& Rope(int64_t layer) const;

  bool operator==(const ModelConfig&) const = default;
};

// Parses config.json text; every error names the offending key. InvalidArgument for bad or
// inconsistent values (including a model_type other than deepseek_v4), Unimplemented for
// options this engine does not run (scoring_func other than sqrtsoftplus, rope types other
// than default/yarn, num_key_value_heads != 1, tied embeddings, biases).
Result<ModelConfig> ParseModelConfig(std::string_view json_text);
// The checks ParseModelConfig ends with; rerun after editing a parsed config (for example
// overriding num_layers, which must then also resize the per-layer lists).
Status ValidateModelConfig(const ModelConfig& config);
// Reads DIR/config.json (NotFound when absent); messages start with the file's path.
Result<ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir);

}  // namespace peregrine
