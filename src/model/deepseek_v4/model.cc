#include "model/deepseek_v4/model.h"

#include <string>

#include "backend/cpu/cpu_ops.h"
#include "model/deepseek_v4/layers.h"

namespace peregrine::deepseek_v4 {

Result<std::unique_ptr<Model>> Model::Load(const std::filesystem::path& dir, int num_threads) {
  PG_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  PG_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(dir));
  return Create(std::move(config), std::move(checkpoint), num_threads);
}

Result<std::unique_ptr<Model>> Model::Create(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint,
                                             int num_threads) {
  PG_ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(config, *checkpoint));
  return std::unique_ptr<Model>(new Model(std::move(config), std::move(checkpoint), std::move(weights), num_threads));
}

Model::Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights, int num_threads)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      weights_(std::move(weights)),
      rope_main_(config_.rope_main, config_.rope_head_dim),
      rope_compress_(config_.rope_compress, config_.rope_head_dim),
      pool_(num_threads) {}

Status Model::Forward(SequenceState& state, std::span<const int32_t> tokens, bool all_logits,
                      std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int64_t t_n = static_cast<int64_t>(tokens.size());
  if (t_n == 0) return InvalidArgument("forward called with no tokens");
  for (int32_t id : tokens)
    if (id < 0 || id >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
  if (state.num_tokens + t_n > c.max_position_embeddings)
    return OutOfRange("sequence longer than max_position_embeddings");

  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  std::vector<float> streams(static_cast<size_t>(t_n * hc * d));  // [T, hc, D]
  for (int64_t t = 0; t < t_n; ++t)
    for (int64_t i = 0; i < hc; ++i)
      std::copy_n(weights_.embed.f32() + static_cast<int64_t>(tokens[static_cast<size_t>(t)]) * d, d,
                  streams.data() + (t * hc + i) * d);

  std::vector<float> x(static_cast<size_t>(t_n * d)), f(x.size());
  std::vector<float> post(static_cast<size_t>(t_n * hc)), comb(static_cast<size_t>(t_n * hc * hc));
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(i)];
    const bool sliding = c.layer_types[static_cast<size_t>(i)] == AttentionType::kSliding;
    const AttentionContext ctx{c, sliding ? rope_main_ : rope_compress_, pool_};

    HyperConnectionPre(c, lw.hc_attn, streams.data(), t_n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), lw.attn_norm.f32(), x.data(), t_n, d, eps);
    Attention(ctx, lw.attn, state.layers[static_cast<size_t>(i)], state.num_tokens, x.data(), t_n, f.data());
    HyperConnectionPost(c, streams.data(), f.data(), post.data(), comb.data(), t_n);

    HyperConnectionPre(c, lw.hc_ffn, streams.data(), t_n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), lw.ffn_norm.f32(), x.data(), t_n, d, eps);
    Moe(c, pool_, lw.ffn, c.mlp_layer_types[static_cast<size_t>(i)], tokens, x.data(), f.data());
    HyperConnectionPost(c, streams.data(), f.data(), post.data(), comb.data(), t_n);
  }
  state.num_tokens += t_n;

  const int64_t first = all_logits ? 0 : t_n - 1;
  const int64_t rows = t_n - first;
  HyperConnectionHead(c, weights_.hc_head, streams.data() + first * hc * d, rows, x.data());
  cpu::RmsNorm(x.data(), weights_.norm.f32(), x.data(), rows, d, eps);
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  cpu::Linear(pool_, x.data(), weights_.head.f32(), logits->data(), rows, d, c.vocab_size);
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4
