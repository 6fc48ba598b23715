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
  PG_RETURN_IF_ERROR(ValidateModelConfig(config));
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
  const Chunk chunk{&state, tokens, all_logits, true};
  return Forward(std::span<const Chunk>(&chunk, 1), logits);
}

Status Model::Forward(std::span<const Chunk> batch, std::vector<float>* logits) {
  const ModelConfig& c = config_;
  int64_t t_n = 0;
  for (const Chunk& chunk : batch) {
    if (chunk.tokens.empty()) return InvalidArgument("forward called with an empty chunk");
    for (int32_t id : chunk.tokens)
      if (id < 0 || id >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
    if (chunk.state->num_tokens + static_cast<int64_t>(chunk.tokens.size()) > c.max_position_embeddings)
      return OutOfRange("sequence longer than max_position_embeddings");
    t_n += static_cast<int64_t>(chunk.tokens.size());
  }
  if (t_n == 0) return InvalidArgument("forward called with no tokens");

  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  std::vector<int32_t> ids;  // [N] every token of the batch, chunk after chunk
  ids.reserve(static_cast<size_t>(t_n));
  for (const Chunk& chunk : batch) ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
  std::vector<float> streams(static_cast<size_t>(t_n * hc * d));  // [N, hc, D]
  for (int64_t t = 0; t < t_n; ++t)
    for (int64_t i = 0; i < hc; ++i)
      std::copy_n(weights_.embed.f32() + static_cast<int64_t>(ids[static_cast<size_t>(t)]) * d, d,
                  streams.data() + (t * hc + i) * d);

  std::vector<float> x(static_cast<size_t>(t_n * d)), f(x.size());  // [N, D]
  std::vector<float> post(static_cast<size_t>(t_n * hc)), comb(static_cast<size_t>(t_n * hc * hc));
  std::vector<Segment> segments(batch.size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(i)];
    const bool sliding = c.layer_types[static_cast<size_t>(i)] == AttentionType::kSliding;
    const AttentionContext ctx{c, sliding ? rope_main_ : rope_compress_, pool_};
    int64_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const int64_t n = static_cast<int64_t>(batch[b].tokens.size());
      segments[b] = {&batch[b].state->layers[static_cast<size_t>(i)], batch[b].state->num_tokens, row, n};
      row += n;
    }

    HyperConnectionPre(c, lw.hc_attn, streams.data(), t_n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), lw.attn_norm.f32(), x.data(), t_n, d, eps);
    Attention(ctx, lw.attn, segments, x.data(), t_n, f.data());
    HyperConnectionPost(c, streams.data(), f.data(), post.data(), comb.data(), t_n);

    HyperConnectionPre(c, lw.hc_ffn, streams.data(), t_n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), lw.ffn_norm.f32(), x.data(), t_n, d, eps);
    Moe(c, pool_, lw.ffn, c.mlp_layer_types[static_cast<size_t>(i)], ids, x.data(), f.data());
    HyperConnectionPost(c, streams.data(), f.data(), post.data(), comb.data(), t_n);
  }

  // Gather the rows that need logits, then one head pass over all of them.
  std::vector<float> head_in;  // [R, hc, D]
  int64_t row = 0;
  for (const Chunk& chunk : batch) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    chunk.state->num_tokens += n;
    if (chunk.needs_logits) {
      const int64_t first = chunk.all_logits ? row : row + n - 1;
      head_in.insert(head_in.end(), streams.begin() + first * hc * d, streams.begin() + (row + n) * hc * d);
    }
    row += n;
  }
  const int64_t rows = static_cast<int64_t>(head_in.size()) / (hc * d);
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  if (rows == 0) return Status::Ok();
  HyperConnectionHead(c, weights_.hc_head, head_in.data(), rows, x.data());
  cpu::RmsNorm(x.data(), weights_.norm.f32(), x.data(), rows, d, eps);
  cpu::Linear(pool_, x.data(), weights_.head.f32(), logits->data(), rows, d, c.vocab_size);
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4
