#include "model/tensor_names.h"

#include <fmt/format.h>

#include <span>

namespace peregrine {
namespace {

struct Rename {
  std::string_view from;
  std::string_view to;
};

// Whole names outside the layer stack (after the `model.` prefix is stripped).
constexpr Rename kTopLevel[] = {
    {"embed_tokens.weight", "embed.weight"}, {"lm_head.weight", "head.weight"},
    {"hc_head.hc_fn", "hc_head_fn"},         {"hc_head.hc_base", "hc_head_base"},
    {"hc_head.hc_scale", "hc_head_scale"},
};

// Names inside `layers.N.`: HF save_pretrained's kv_norm, then HF's module names.
constexpr Rename kInLayer[] = {
    {"attn.norm.weight", "attn.kv_norm.weight"},
    {"self_attn.sinks", "attn.attn_sink"},
    {"self_attn.q_a_proj.weight", "attn.wq_a.weight"},
    {"self_attn.q_a_norm.weight", "attn.q_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn.wq_b.weight"},
    {"self_attn.kv_proj.weight", "attn.wkv.weight"},
    {"self_attn.kv_norm.weight", "attn.kv_norm.weight"},
    {"self_attn.o_a_proj.weight", "attn.wo_a.weight"},
    {"self_attn.o_b_proj.weight", "attn.wo_b.weight"},
    {"self_attn.compressor.position_bias", "attn.compressor.ape"},
    {"self_attn.compressor.kv_proj.weight", "attn.compressor.wkv.weight"},
    {"self_attn.compressor.gate_proj.weight", "attn.compressor.wgate.weight"},
    {"self_attn.compressor.kv_norm.weight", "attn.compressor.norm.weight"},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
    {"self_attn.compressor.indexer.kv_proj.weight", "attn.indexer.compressor.wkv.weight"},
    {"self_attn.compressor.indexer.gate_proj.weight", "attn.indexer.compressor.wgate.weight"},
    {"self_attn.compressor.indexer.kv_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b.weight"},
    {"self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj.weight"},
    {"mlp.gate.weight", "ffn.gate.weight"},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.gate.tid2eid", "ffn.gate.tid2eid"},
    {"mlp.shared_experts.gate_proj.weight", "ffn.shared_experts.w1.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn.shared_experts.w3.weight"},
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"attn_hc.fn", "hc_attn_fn"},
    {"attn_hc.base", "hc_attn_base"},
    {"attn_hc.scale", "hc_attn_scale"},
    {"ffn_hc.fn", "hc_ffn_fn"},
    {"ffn_hc.base", "hc_ffn_base"},
    {"ffn_hc.scale", "hc_ffn_scale"},
};

constexpr std::string_view kFusedGateUp = "mlp.experts.gate_up_proj";
constexpr std::string_view kFusedDown = "mlp.experts.down_proj";

std::string_view Lookup(std::span<const Rename> table, std::string_view name) {
  for (const Rename& r : table)
    if (r.from == name) return r.to;
  return {};
}

// A weight's block scale under another suffix (`.scale`, or V3/SGLang `.weight_scale_inv`)
// follows its weight's rename.
std::string RenameInLayer(std::string_view rest) {
  if (const auto to = Lookup(kInLayer, rest); !to.empty()) return std::string(to);
  for (const std::string_view suffix :
       {std::string_view(".weight_scale_inv"), std::string_view(".scale")}) {
    if (!rest.ends_with(suffix)) continue;
    const std::string_view stem = rest.substr(0, rest.size() - suffix.size());
    const std::string weight = fmt::format("{}.weight", stem);
    const auto to = Lookup(kInLayer, weight);
    const std::string_view base = to.empty() ? stem : to.substr(0, to.size() - 7);
    return fmt::format("{}.scale", base);
  }
  return std::string(rest);
}

// Splits "layers.N.rest" into ("layers.N.", "rest"); false for other names.
bool SplitLayer(std::string_view name, std::string_view* prefix, std::string_view* rest) {
  constexpr std::string_view kLayers = "layers.";
  if (!name.starts_with(kLayers)) return false;
  size_t i = kLayers.size();
  const size_t digits_begin = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == digits_begin || i >= name.size() || name[i] != '.') return false;
  *prefix = name.substr(0, i + 1);
  *rest = name.substr(i + 1);
  return true;
}

std::string_view StripModelPrefix(std::string_view name) {
  constexpr std::string_view kModel = "model.";
  return name.starts_with(kModel) ? name.substr(kModel.size()) : name;
}

}  // namespace

std::string CanonicalTensorName(std::string_view stored_name) {
  const std::string_view name = StripModelPrefix(stored_name);
  if (const auto to = Lookup(kTopLevel, name); !to.empty()) return std::string(to);
  std::string_view prefix, rest;
  if (!SplitLayer(name, &prefix, &rest)) return std::string(name);
  return fmt::format("{}{}", prefix, RenameInLayer(rest));
}

Result<std::vector<CanonicalSlice>> MapStoredTensor(std::string_view stored_name,
                                                    const Shape& shape) {
  const std::string_view name = StripModelPrefix(stored_name);
  std::string_view prefix, rest;
  const bool in_layer = SplitLayer(name, &prefix, &rest);
  const bool is_gate_up = in_layer && rest == kFusedGateUp;
  const bool is_down = in_layer && rest == kFusedDown;
  if (!is_gate_up && !is_down)
    return std::vector<CanonicalSlice>{{CanonicalTensorName(stored_name), 0, shape}};

  if (shape.ndim() != 3 || (is_gate_up && shape[1] % 2 != 0))
    return InvalidArgument(fmt::format("fused expert tensor '{}' has shape {}, expected {}",
                                       stored_name, shape.ToString(),
                                       is_gate_up ? "[E, 2I, H]" : "[E, H, I]"));
  const int64_t num_experts = shape[0];
  const int64_t per_expert = shape[1] * shape[2];
  std::vector<CanonicalSlice> slices;
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto name_of = [&](std::string_view w) {
      return fmt::format("{}ffn.experts.{}.{}.weight", prefix, e, w);
    };
    if (is_gate_up) {
      // HF concatenates gate (w1) then up (w3) along dim 1.
      const int64_t rows = shape[1] / 2;
      slices.push_back({name_of("w1"), e * per_expert, Shape{rows, shape[2]}});
      slices.push_back({name_of("w3"), e * per_expert + rows * shape[2], Shape{rows, shape[2]}});
    } else {
      slices.push_back({name_of("w2"), e * per_expert, Shape{shape[1], shape[2]}});
    }
  }
  return slices;
}

}  // namespace peregrine
