#include "config/rope_parameters.h"

#include <fmt/format.h>

#include <string>

namespace peregrine {
namespace {

// HF writes both `rope_type` and the legacy `type`; `rope_type` wins.
Result<std::string> RopeType(const JsonFields& d) {
  PG_ASSIGN_OR_RETURN(auto rope_type, d.OptionalString("rope_type"));
  if (rope_type) return *rope_type;
  PG_ASSIGN_OR_RETURN(auto type, d.OptionalString("type"));
  if (type) return *type;
  return std::string("default");
}

// One table from one dict. `default_theta` applies when the dict has no `rope_theta`;
// `forced_theta` (> 0) overrides it (HF's flat form always uses compress_rope_theta).
Result<RopeConfig> ParseTable(const JsonFields& d, double default_theta, double forced_theta,
                              const ModelConfig& cfg) {
  RopeConfig rope;
  rope.theta = default_theta;
  PG_RETURN_IF_ERROR(d.ReadDouble("rope_theta", &rope.theta));
  if (forced_theta > 0) rope.theta = forced_theta;
  if (!(rope.theta > 0))
    return InvalidArgument(fmt::format("'{}' must be positive", d.KeyName("rope_theta")));

  PG_ASSIGN_OR_RETURN(const auto prf, d.OptionalDouble("partial_rotary_factor"));
  if (prf) {
    const auto dims = static_cast<int64_t>(static_cast<double>(cfg.head_dim) * *prf);
    if (dims != cfg.rope_head_dim)
      return InvalidArgument(fmt::format("'{}' gives {} rope dims, but the model has {}",
                                         d.KeyName("partial_rotary_factor"), dims,
                                         cfg.rope_head_dim));
  }

  PG_ASSIGN_OR_RETURN(const std::string type, RopeType(d));
  if (type == "default") return rope;
  if (type != "yarn")
    return Unimplemented(
        fmt::format("rope type '{}' ({}) is not supported; DeepSeek-V4 uses "
                    "'default' or 'yarn'",
                    type, d.KeyName("rope_type")));

  rope.yarn = true;
  rope.original_max_position_embeddings = cfg.max_position_embeddings;
  PG_RETURN_IF_ERROR(
      d.ReadInt("original_max_position_embeddings", &rope.original_max_position_embeddings));
  if (rope.original_max_position_embeddings <= 0)
    return InvalidArgument(
        fmt::format("'{}' must be positive", d.KeyName("original_max_position_embeddings")));
  // HF requires the key; an explicit null derives it from the context lengths.
  if (!d.Contains("factor"))
    return InvalidArgument(fmt::format("yarn needs '{}'", d.KeyName("factor")));
  rope.factor = static_cast<double>(cfg.max_position_embeddings) /
                static_cast<double>(rope.original_max_position_embeddings);
  PG_RETURN_IF_ERROR(d.ReadDouble("factor", &rope.factor));
  if (!(rope.factor > 0))
    return InvalidArgument(fmt::format("'{}' must be positive", d.KeyName("factor")));

  // HF reads `beta_fast or 32`: zero counts as unset.
  PG_ASSIGN_OR_RETURN(const auto beta_fast, d.OptionalDouble("beta_fast"));
  PG_ASSIGN_OR_RETURN(const auto beta_slow, d.OptionalDouble("beta_slow"));
  rope.beta_fast = beta_fast && *beta_fast != 0 ? *beta_fast : 32.0;
  rope.beta_slow = beta_slow && *beta_slow != 0 ? *beta_slow : 1.0;
  if (!(rope.beta_fast > 0) || !(rope.beta_slow > 0))
    return InvalidArgument(
        fmt::format("'{}' and 'beta_slow' must be positive", d.KeyName("beta_fast")));
  rope.attention_factor = 1.0;
  PG_RETURN_IF_ERROR(d.ReadDouble("attention_factor", &rope.attention_factor));
  if (!(rope.attention_factor > 0))
    return InvalidArgument(fmt::format("'{}' must be positive", d.KeyName("attention_factor")));
  return rope;
}

Result<RopeConfig> ParseNestedTable(const nlohmann::json& dict, const std::string& path,
                                    double default_theta, const ModelConfig& cfg) {
  return ParseTable(JsonFields(dict, path), default_theta, 0.0, cfg);
}

}  // namespace

Status ParseRopeParameters(const JsonFields& root, ModelConfig* cfg) {
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  PG_RETURN_IF_ERROR(root.ReadDouble("rope_theta", &rope_theta));
  PG_RETURN_IF_ERROR(root.ReadDouble("compress_rope_theta", &compress_rope_theta));
  if (!(rope_theta > 0)) return InvalidArgument("'rope_theta' must be positive");
  if (!(compress_rope_theta > 0)) return InvalidArgument("'compress_rope_theta' must be positive");

  // HF: `rope_scaling or rope_parameters` -- a non-empty legacy dict takes precedence.
  std::string key = "rope_parameters";
  const nlohmann::json* scaling = root.Find("rope_scaling");
  const nlohmann::json* params = root.Find("rope_parameters");
  const nlohmann::json* rp = params;
  if (scaling != nullptr && !(scaling->is_object() && scaling->empty())) {
    rp = scaling;
    key = "rope_scaling";
  }
  if (rp != nullptr && !rp->is_object())
    return InvalidArgument(fmt::format("'{}' must be an object", key));

  const bool has_main = rp != nullptr && rp->contains("main");
  const bool has_compress = rp != nullptr && rp->contains("compress");
  if (has_main || has_compress) {
    const auto main = rp->find("main");
    const auto compress = rp->find("compress");
    if (!has_main || !has_compress || !main->is_object() || !compress->is_object())
      return InvalidArgument(fmt::format("'{}' must hold both 'main' and 'compress' objects", key));
    PG_ASSIGN_OR_RETURN(cfg->rope_main,
                        ParseNestedTable(*main, fmt::format("{}.main", key), rope_theta, *cfg));
    PG_ASSIGN_OR_RETURN(
        cfg->rope_compress,
        ParseNestedTable(*compress, fmt::format("{}.compress", key), rope_theta, *cfg));
    return Status::Ok();
  }

  cfg->rope_main = RopeConfig{};
  cfg->rope_main.theta = rope_theta;
  const nlohmann::json empty = nlohmann::json::object();
  PG_ASSIGN_OR_RETURN(cfg->rope_compress,
                      ParseTable(JsonFields(rp ? *rp : empty, key), compress_rope_theta,
                                 compress_rope_theta, *cfg));
  return Status::Ok();
}

}  // namespace peregrine
