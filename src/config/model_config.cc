// ParseModelConfig mirrors HF transformers' DeepseekV4Config (defaults, legacy keys, list
// truncation) and then validates what the engine relies on.
#include "config/model_config.h"

#include <fmt/format.h>

#include <array>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/check.h"
#include "config/json_fields.h"
#include "config/rope_parameters.h"

namespace peregrine {

int64_t ModelConfig::CompressRatio(int64_t layer) const {
  PG_CHECK(layer >= 0 && layer < static_cast<int64_t>(layer_types.size()), "layer out of range");
  switch (layer_types[static_cast<size_t>(layer)]) {
    case AttentionType::kSliding: return 0;
    case AttentionType::kCompressedSparse: return compress_ratio_csa;
    case AttentionType::kHeavilyCompressed: return compress_ratio_hca;
  }
  return 0;
}

const RopeConfig& ModelConfig::Rope(int64_t layer) const {
  return CompressRatio(layer) == 0 ? rope_main : rope_compress;
}

namespace {

constexpr std::string_view kSlidingName = "sliding_attention";
constexpr std::string_view kCsaName = "compressed_sparse_attention";
constexpr std::string_view kHcaName = "heavily_compressed_attention";

std::string Indexed(std::string_view key, size_t i) { return fmt::format("{}[{}]", key, i); }

// A per-layer list: `num_layers` entries are used, extra trailing ones (the MTP slot of
// `compress_ratios`) are dropped as HF does; fewer is an error.
Result<const nlohmann::json*> PerLayerList(const JsonFields& root, std::string_view key,
                                           int64_t num_layers) {
  const nlohmann::json* list = root.Find(key);
  if (list == nullptr) return list;
  if (!list->is_array()) return InvalidArgument(fmt::format("'{}' must be a list", key));
  if (static_cast<int64_t>(list->size()) < num_layers)
    return InvalidArgument(fmt::format("'{}' has {} entries but num_hidden_layers is {}", key,
                                       list->size(), num_layers));
  return list;
}

Status ParseCompressRates(const JsonFields& root, ModelConfig* cfg) {
  if (const nlohmann::json* rates = root.Find("compress_rates")) {
    if (!rates->is_object()) return InvalidArgument("'compress_rates' must be an object");
    for (const auto& [name, value] : rates->items()) {
      const std::string what = fmt::format("compress_rates.{}", name);
      PG_ASSIGN_OR_RETURN(const int64_t rate, JsonToInt(value, what));
      if (name == kCsaName) {
        cfg->compress_ratio_csa = rate;
      } else if (name == kHcaName) {
        cfg->compress_ratio_hca = rate;
      } else if (name != kSlidingName || rate != 0) {
        return InvalidArgument(fmt::format("unknown key '{}'", what));
      }
    }
  }
  PG_RETURN_IF_ERROR(root.ReadInt("compress_rate_csa", &cfg->compress_ratio_csa));
  PG_RETURN_IF_ERROR(root.ReadInt("compress_rate_hca", &cfg->compress_ratio_hca));
  return Status::Ok();
}

// `layer_types` > legacy `compress_ratios` > HF's default (V4-Pro) pattern.
Status ParseLayerTypes(const JsonFields& root, ModelConfig* cfg) {
  PG_RETURN_IF_ERROR(ParseCompressRates(root, cfg));
  const auto n = static_cast<size_t>(cfg->num_layers);
  cfg->layer_types.clear();
  PG_ASSIGN_OR_RETURN(const nlohmann::json* types,
                      PerLayerList(root, "layer_types", cfg->num_layers));
  if (types != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      const nlohmann::json& t = (*types)[i];
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name == kSlidingName) {
        cfg->layer_types.push_back(AttentionType::kSliding);
      } else if (name == kCsaName) {
        cfg->layer_types.push_back(AttentionType::kCompressedSparse);
      } else if (name == kHcaName) {
        cfg->layer_types.push_back(AttentionType::kHeavilyCompressed);
      } else {
        return InvalidArgument(fmt::format("'{}' is '{}'; expected {}, {} or {}",
                                           Indexed("layer_types", i), name, kSlidingName, kCsaName,
                                           kHcaName));
      }
    }
    return Status::Ok();
  }
  PG_ASSIGN_OR_RETURN(const nlohmann::json* ratios,
                      PerLayerList(root, "compress_ratios", cfg->num_layers));
  if (ratios != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      PG_ASSIGN_OR_RETURN(const int64_t r, JsonToInt((*ratios)[i], Indexed("compress_ratios", i)));
      const bool is_csa = r == cfg->compress_ratio_csa;
      const bool is_hca = r == cfg->compress_ratio_hca;
      if (r == 0) {
        cfg->layer_types.push_back(AttentionType::kSliding);
      } else if (is_csa && !is_hca) {
        cfg->layer_types.push_back(AttentionType::kCompressedSparse);
      } else if (is_hca && !is_csa) {
        cfg->layer_types.push_back(AttentionType::kHeavilyCompressed);
      } else {
        return InvalidArgument(fmt::format("'{}' is {}; expected 0, {} (CSA) or {} (HCA)",
                                           Indexed("compress_ratios", i), r,
                                           cfg->compress_ratio_csa, cfg->compress_ratio_hca));
      }
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < n; ++i) {
    // Two HCA layers, then CSA/HCA alternating starting with HCA.
    const bool is_csa = i >= 2 && (i - 2) % 2 == 1;
    cfg->layer_types.push_back(is_csa ? AttentionType::kCompressedSparse
                                      : AttentionType::kHeavilyCompressed);
  }
  return Status::Ok();
}

// `mlp_layer_types` > `num_hash_layers` (default 3) leading hash layers.
Status ParseMlpLayerTypes(const JsonFields& root, ModelConfig* cfg) {
  const auto n = static_cast<size_t>(cfg->num_layers);
  cfg->mlp_layer_types.clear();
  PG_ASSIGN_OR_RETURN(const nlohmann::json* types,
                      PerLayerList(root, "mlp_layer_types", cfg->num_layers));
  if (types != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      const nlohmann::json& t = (*types)[i];
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name == "hash_moe") {
        cfg->mlp_layer_types.push_back(MoeType::kHash);
      } else if (name == "moe") {
        cfg->mlp_layer_types.push_back(MoeType::kLearned);
      } else {
        return InvalidArgument(fmt::format("'{}' is '{}'; expected hash_moe or moe",
                                           Indexed("mlp_layer_types", i), name));
      }
    }
    return Status::Ok();
  }
  int64_t num_hash = 3;
  PG_RETURN_IF_ERROR(root.ReadInt("num_hash_layers", &num_hash));
  if (num_hash < 0) return InvalidArgument("'num_hash_layers' must not be negative");
  for (size_t i = 0; i < n; ++i)
    cfg->mlp_layer_types.push_back(static_cast<int64_t>(i) < num_hash ? MoeType::kHash
                                                                      : MoeType::kLearned);
  return Status::Ok();
}

// `partial_rotary_factor` wins (HF); `qk_rope_head_dim` must agree with it when both exist.
Status ParseRopeHeadDim(const JsonFields& root, ModelConfig* cfg) {
  PG_ASSIGN_OR_RETURN(const auto factor, root.OptionalDouble("partial_rotary_factor"));
  PG_ASSIGN_OR_RETURN(const auto dims, root.OptionalInt("qk_rope_head_dim"));
  if (factor) {
    cfg->rope_head_dim = static_cast<int64_t>(static_cast<double>(cfg->head_dim) * *factor);
    if (dims && *dims != cfg->rope_head_dim)
      return InvalidArgument(fmt::format(
          "'qk_rope_head_dim' ({}) disagrees with 'partial_rotary_factor' x 'head_dim' ({})", *dims,
          cfg->rope_head_dim));
  } else if (dims) {
    cfg->rope_head_dim = *dims;
  } else {
    cfg->rope_head_dim = cfg->head_dim / 8;  // HF's default factor 64 / 512
  }
  return Status::Ok();
}

Status ParseTokenIds(const JsonFields& root, ModelConfig* cfg) {
  cfg->bos_token_id = 0;
  if (root.Contains("bos_token_id") && !root.Has("bos_token_id")) cfg->bos_token_id = -1;
  PG_RETURN_IF_ERROR(root.ReadInt("bos_token_id", &cfg->bos_token_id));
  cfg->eos_token_ids = {1};
  if (!root.Contains("eos_token_id")) return Status::Ok();
  cfg->eos_token_ids.clear();
  const nlohmann::json* eos = root.Find("eos_token_id");
  if (eos == nullptr) return Status::Ok();
  if (!eos->is_array()) {
    PG_ASSIGN_OR_RETURN(const int64_t id, JsonToInt(*eos, "eos_token_id"));
    cfg->eos_token_ids.push_back(id);
    return Status::Ok();
  }
  for (size_t i = 0; i < eos->size(); ++i) {
    PG_ASSIGN_OR_RETURN(const int64_t id, JsonToInt((*eos)[i], Indexed("eos_token_id", i)));
    cfg->eos_token_ids.push_back(id);
  }
  return Status::Ok();
}

// DSpark's keys (docs/decisions/0005-block-drafter-format.md); the stage count is
// num_nextn_predict_layers, or `n_mtp_layers` where a config spells it so.
Status ParseBlockDrafter(const JsonFields& root, ModelConfig* cfg) {
  PG_RETURN_IF_ERROR(root.ReadInt("dspark_block_size", &cfg->dspark_block_size));
  if (cfg->dspark_block_size == 0) return Status::Ok();
  if (!root.Contains("num_nextn_predict_layers"))
    PG_RETURN_IF_ERROR(root.ReadInt("n_mtp_layers", &cfg->num_nextn_predict_layers));
  PG_RETURN_IF_ERROR(root.ReadInt("dspark_noise_token_id", &cfg->dspark_noise_token_id));
  PG_RETURN_IF_ERROR(root.ReadInt("dspark_markov_rank", &cfg->dspark_markov_rank));
  cfg->dspark_target_layer_ids.clear();
  const nlohmann::json* ids = root.Find("dspark_target_layer_ids");
  if (ids == nullptr || !ids->is_array()) return InvalidArgument("'dspark_target_layer_ids' must be a list of layer ids");
  for (size_t i = 0; i < ids->size(); ++i) {
    PG_ASSIGN_OR_RETURN(const int64_t id, JsonToInt((*ids)[i], Indexed("dspark_target_layer_ids", i)));
    cfg->dspark_target_layer_ids.push_back(id);
  }
  return Status::Ok();
}

// Features of the HF config class that this engine does not implement.
Status CheckSupported(const JsonFields& root) {
  std::string value = "sqrtsoftplus";
  PG_RETURN_IF_ERROR(root.ReadString("scoring_func", &value));
  if (value != "sqrtsoftplus")  // HF also accepts softmax and sigmoid
    return Unimplemented(
        fmt::format("'scoring_func' '{}' is not supported (only sqrtsoftplus)", value));
  value = "silu";
  PG_RETURN_IF_ERROR(root.ReadString("hidden_act", &value));
  if (value != "silu")
    return Unimplemented(fmt::format("'hidden_act' {} is not supported (only silu)", value));
  int64_t num_kv_heads = 1;
  PG_RETURN_IF_ERROR(root.ReadInt("num_key_value_heads", &num_kv_heads));
  if (num_kv_heads != 1)
    return Unimplemented("'num_key_value_heads' must be 1 (V4 shares one KV head)");
  for (const char* key : {"attention_bias", "mlp_bias", "tie_word_embeddings"}) {
    bool flag = false;
    PG_RETURN_IF_ERROR(root.ReadBool(key, &flag));
    if (flag) return Unimplemented(fmt::format("'{}' = true is not supported", key));
  }
  return Status::Ok();
}

Result<ModelConfig> ParseChecked(std::string_view json_text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return InvalidArgument(std::string("config is not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) return InvalidArgument("config must be a JSON object");
  const JsonFields root(doc, "");
  PG_ASSIGN_OR_RETURN(const auto model_type, root.OptionalString("model_type"));
  if (!model_type) return InvalidArgument("config has no 'model_type'");
  if (*model_type != "deepseek_v4")
    return InvalidArgument(
        fmt::format("unknown model_type '{}' (expected deepseek_v4)", *model_type));
  PG_RETURN_IF_ERROR(CheckSupported(root));

  // Defaults are HF's DeepseekV4Config defaults (the V4-Flash shapes).
  ModelConfig c;
  c.model_type = *model_type;
  c.vocab_size = 129280;
  c.hidden_size = 4096;
  c.num_layers = 43;
  c.num_heads = 64;
  c.head_dim = 512;
  c.q_lora_rank = 1024;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.sliding_window = 128;
  c.max_position_embeddings = 1048576;
  c.index_n_heads = 64;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.num_experts = 256;
  c.num_experts_per_tok = 6;
  c.num_shared_experts = 1;
  c.moe_intermediate_size = 2048;
  c.routed_scaling_factor = 1.5;
  c.norm_topk_prob = true;
  c.swiglu_limit = 10.0;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.rms_norm_eps = 1e-6;
  c.num_nextn_predict_layers = 1;

  const std::array<std::pair<const char*, int64_t*>, 20> ints = {{
      {"vocab_size", &c.vocab_size},
      {"hidden_size", &c.hidden_size},
      {"num_hidden_layers", &c.num_layers},
      {"num_attention_heads", &c.num_heads},
      {"head_dim", &c.head_dim},
      {"q_lora_rank", &c.q_lora_rank},
      {"o_groups", &c.o_groups},
      {"o_lora_rank", &c.o_lora_rank},
      {"sliding_window", &c.sliding_window},
      {"max_position_embeddings", &c.max_position_embeddings},
      {"index_n_heads", &c.index_n_heads},
      {"index_head_dim", &c.index_head_dim},
      {"index_topk", &c.index_topk},
      {"num_local_experts", &c.num_experts},  // HF attribute alias
      {"n_routed_experts", &c.num_experts},
      {"num_experts_per_tok", &c.num_experts_per_tok},
      {"n_shared_experts", &c.num_shared_experts},
      {"intermediate_size", &c.moe_intermediate_size},  // HF attribute alias
      {"moe_intermediate_size", &c.moe_intermediate_size},
      {"num_nextn_predict_layers", &c.num_nextn_predict_layers},
  }};
  for (const auto& [key, field] : ints) PG_RETURN_IF_ERROR(root.ReadInt(key, field));
  PG_RETURN_IF_ERROR(root.ReadInt("hc_mult", &c.hc_mult));
  PG_RETURN_IF_ERROR(root.ReadInt("hc_sinkhorn_iters", &c.hc_sinkhorn_iters));
  PG_RETURN_IF_ERROR(root.ReadDouble("hc_eps", &c.hc_eps));
  PG_RETURN_IF_ERROR(root.ReadDouble("rms_norm_eps", &c.rms_norm_eps));
  PG_RETURN_IF_ERROR(root.ReadDouble("routed_scaling_factor", &c.routed_scaling_factor));
  PG_RETURN_IF_ERROR(root.ReadDouble("swiglu_limit", &c.swiglu_limit));
  PG_RETURN_IF_ERROR(root.ReadBool("norm_topk_prob", &c.norm_topk_prob));

  // Layer lists depend on num_layers; the rope tables on head_dim and rope_head_dim.
  // Bounded before the per-layer lists are built from it.
  if (c.num_layers <= 0 || c.num_layers > 65536)
    return InvalidArgument(
        fmt::format("'num_hidden_layers' must be in [1, 65536], got {}", c.num_layers));
  PG_RETURN_IF_ERROR(ParseLayerTypes(root, &c));
  PG_RETURN_IF_ERROR(ParseMlpLayerTypes(root, &c));
  PG_RETURN_IF_ERROR(ParseRopeHeadDim(root, &c));
  PG_RETURN_IF_ERROR(ParseRopeParameters(root, &c));
  PG_RETURN_IF_ERROR(ParseTokenIds(root, &c));
  PG_RETURN_IF_ERROR(ParseBlockDrafter(root, &c));
  PG_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

}  // namespace

Result<ModelConfig> ParseModelConfig(std::string_view json_text) {
  // nlohmann throws on type misuse and allocation failure; nothing may escape this boundary.
  try {
    return ParseChecked(json_text);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("config could not be read: ") + e.what());
  }
}

Result<ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return NotFound(fmt::format("no config.json in {}", model_dir.string()));
  constexpr uintmax_t kMaxBytes = 16u << 20;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return DataLoss(fmt::format("{}: {}", path.string(), ec.message()));
  if (size > kMaxBytes)
    return InvalidArgument(fmt::format("{} is larger than 16 MiB", path.string()));
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return DataLoss(fmt::format("{}: read failed", path.string()));
  Result<ModelConfig> config = ParseModelConfig(text);
  if (!config.ok())
    return Status(config.status().code(),
                  fmt::format("{}: {}", path.string(), config.status().message()));
  return config;
}

}  // namespace peregrine
