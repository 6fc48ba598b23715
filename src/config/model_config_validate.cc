// ValidateModelConfig: the invariants the forward pass and the KV-cache sizing rely on.
#include <fmt/format.h>

#include <string>

#include "config/model_config.h"

namespace peregrine {
namespace {

Status Positive(const char* key, int64_t v) {
  if (v > 0) return Status::Ok();
  return InvalidArgument(fmt::format("'{}' must be positive, got {}", key, v));
}

Status NotNegative(const char* key, int64_t v) {
  if (v >= 0) return Status::Ok();
  return InvalidArgument(fmt::format("'{}' must not be negative, got {}", key, v));
}

Status CheckRatio(const char* key, int64_t ratio, int64_t sliding_window) {
  PG_RETURN_IF_ERROR(Positive(key, ratio));
  // Tokens of an unfinished compression block are only visible through the window.
  if (ratio > sliding_window)
    return InvalidArgument(
        fmt::format("'{}' ({}) must not exceed 'sliding_window' ({})", key, ratio, sliding_window));
  return Status::Ok();
}

Status CheckTokenId(const char* key, int64_t id, int64_t vocab_size) {
  if (id >= 0 && id < vocab_size) return Status::Ok();
  return InvalidArgument(
      fmt::format("'{}' {} is outside the vocabulary of {}", key, id, vocab_size));
}

}  // namespace

Status ValidateModelConfig(const ModelConfig& c) {
  PG_RETURN_IF_ERROR(Positive("vocab_size", c.vocab_size));
  PG_RETURN_IF_ERROR(Positive("hidden_size", c.hidden_size));
  PG_RETURN_IF_ERROR(Positive("num_hidden_layers", c.num_layers));
  PG_RETURN_IF_ERROR(Positive("num_attention_heads", c.num_heads));
  PG_RETURN_IF_ERROR(Positive("head_dim", c.head_dim));
  PG_RETURN_IF_ERROR(Positive("q_lora_rank", c.q_lora_rank));
  PG_RETURN_IF_ERROR(Positive("o_groups", c.o_groups));
  PG_RETURN_IF_ERROR(Positive("o_lora_rank", c.o_lora_rank));
  PG_RETURN_IF_ERROR(Positive("sliding_window", c.sliding_window));
  PG_RETURN_IF_ERROR(Positive("max_position_embeddings", c.max_position_embeddings));
  PG_RETURN_IF_ERROR(Positive("index_n_heads", c.index_n_heads));
  PG_RETURN_IF_ERROR(Positive("index_head_dim", c.index_head_dim));
  PG_RETURN_IF_ERROR(Positive("index_topk", c.index_topk));
  PG_RETURN_IF_ERROR(Positive("n_routed_experts", c.num_experts));
  PG_RETURN_IF_ERROR(Positive("num_experts_per_tok", c.num_experts_per_tok));
  PG_RETURN_IF_ERROR(NotNegative("n_shared_experts", c.num_shared_experts));
  PG_RETURN_IF_ERROR(Positive("moe_intermediate_size", c.moe_intermediate_size));
  PG_RETURN_IF_ERROR(Positive("hc_mult", c.hc_mult));
  PG_RETURN_IF_ERROR(Positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
  PG_RETURN_IF_ERROR(NotNegative("num_nextn_predict_layers", c.num_nextn_predict_layers));

  if (c.num_experts_per_tok > c.num_experts)
    return InvalidArgument(fmt::format("'num_experts_per_tok' ({}) exceeds 'n_routed_experts' ({})",
                                       c.num_experts_per_tok, c.num_experts));
  if (c.num_heads % c.o_groups != 0)
    return InvalidArgument(
        fmt::format("'num_attention_heads' ({}) must be a multiple of "
                    "'o_groups' ({})",
                    c.num_heads, c.o_groups));
  if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 != 0)
    return InvalidArgument(
        fmt::format("rope head dim ('qk_rope_head_dim' or "
                    "'partial_rotary_factor' x 'head_dim') must be positive "
                    "and even, got {}",
                    c.rope_head_dim));
  if (c.rope_head_dim > c.head_dim || c.rope_head_dim > c.index_head_dim)
    return InvalidArgument(
        fmt::format("rope head dim {} exceeds 'head_dim' ({}) or "
                    "'index_head_dim' ({})",
                    c.rope_head_dim, c.head_dim, c.index_head_dim));

  const auto n = static_cast<size_t>(c.num_layers);
  if (c.layer_types.size() != n || c.mlp_layer_types.size() != n)
    return InvalidArgument(
        fmt::format("'layer_types' and 'mlp_layer_types' need num_hidden_layers ({}) entries", n));
  for (const AttentionType t : c.layer_types) {
    switch (t) {
      case AttentionType::kSliding: break;
      case AttentionType::kCompressedSparse:
        PG_RETURN_IF_ERROR(CheckRatio("compress_rates.compressed_sparse_attention",
                                      c.compress_ratio_csa, c.sliding_window));
        break;
      case AttentionType::kHeavilyCompressed:
        PG_RETURN_IF_ERROR(CheckRatio("compress_rates.heavily_compressed_attention",
                                      c.compress_ratio_hca, c.sliding_window));
        break;
    }
  }

  if (!(c.hc_eps > 0)) return InvalidArgument("'hc_eps' must be positive");
  if (!(c.rms_norm_eps > 0)) return InvalidArgument("'rms_norm_eps' must be positive");
  if (!(c.routed_scaling_factor > 0))
    return InvalidArgument("'routed_scaling_factor' must be positive");
  if (!(c.swiglu_limit >= 0)) return InvalidArgument("'swiglu_limit' must not be negative");

  if (c.bos_token_id != -1)
    PG_RETURN_IF_ERROR(CheckTokenId("bos_token_id", c.bos_token_id, c.vocab_size));
  for (const int64_t id : c.eos_token_ids)
    PG_RETURN_IF_ERROR(CheckTokenId("eos_token_id", id, c.vocab_size));

  if (c.dspark_block_size != 0) {
    if (c.dspark_block_size < 1 || c.dspark_block_size > 64)
      return InvalidArgument(fmt::format("'dspark_block_size' must be in [1, 64], got {}", c.dspark_block_size));
    if (c.dspark_block_size > c.sliding_window)
      return InvalidArgument(fmt::format("'dspark_block_size' ({}) exceeds 'sliding_window' ({})",
                                         c.dspark_block_size, c.sliding_window));
    PG_RETURN_IF_ERROR(Positive("dspark_markov_rank", c.dspark_markov_rank));
    PG_RETURN_IF_ERROR(CheckTokenId("dspark_noise_token_id", c.dspark_noise_token_id, c.vocab_size));
    if (c.num_nextn_predict_layers < 1)
      return InvalidArgument("a block drafter ('dspark_block_size') needs at least one stage ('num_nextn_predict_layers')");
    if (c.dspark_target_layer_ids.empty()) return InvalidArgument("'dspark_target_layer_ids' must not be empty");
    for (const int64_t id : c.dspark_target_layer_ids)
      if (id < 0 || id >= c.num_layers)
        return InvalidArgument(fmt::format("'dspark_target_layer_ids' names layer {}, outside [0, {})", id, c.num_layers));
  }
  return Status::Ok();
}

}  // namespace peregrine
