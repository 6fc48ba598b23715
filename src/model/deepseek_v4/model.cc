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
  std::vector<Segment> segments;
  std::vector<int32_t> ids;
  std::vector<uint8_t> wanted;
  for (const Chunk& chunk : batch) {
    if (chunk.tokens.empty()) return InvalidArgument("forward called with an empty chunk");
    if (chunk.state->num_tokens + static_cast<int64_t>(chunk.tokens.size()) > config_.max_position_embeddings)
      return OutOfRange("sequence longer than max_position_embeddings");
    const auto n = static_cast<int64_t>(chunk.tokens.size());
    segments.push_back({chunk.state->kv.get(), 0, chunk.state->blocks, {}, chunk.state->num_tokens,
                        static_cast<int64_t>(ids.size()), n});
    ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
    for (int64_t i = 0; i < n; ++i) wanted.push_back(chunk.all_logits || (chunk.needs_logits && i == n - 1));
  }
  PG_RETURN_IF_ERROR(Run(segments, ids, wanted, logits));
  for (const Chunk& chunk : batch) chunk.state->num_tokens += static_cast<int64_t>(chunk.tokens.size());
  return Status::Ok();
}

Status Model::Forward(std::span<const ChunkView> chunks, CpuKvStore& kv, std::vector<float>* logits) {
  std::vector<Segment> segments;
  std::vector<int32_t> ids;
  std::vector<uint8_t> wanted;
  const int64_t block = kv.geometry().block_tokens;
  const KvLayout layout = kv.geometry().Layout();
  for (const ChunkView& chunk : chunks) {
    const int64_t n = chunk.num_tokens;
    if (n <= 0 || static_cast<int64_t>(chunk.tokens.size()) != n || chunk.feeds_last)
      return InvalidArgument("a CPU step chunk must carry all of its tokens");
    if (chunk.slot < 0 || chunk.slot >= kv.num_slots()) return InvalidArgument("KV slot outside the store");
    if (chunk.first_position < 0 || chunk.first_position + n > config_.max_position_embeddings)
      return OutOfRange("sequence longer than max_position_embeddings");
    if (layout.BlocksFor(chunk.first_position + n) > static_cast<int64_t>(chunk.blocks.size()))
      return InvalidArgument("the block table does not cover the chunk");
    for (int32_t b : chunk.blocks)
      if (b < 0 || b >= kv.num_blocks()) return InvalidArgument("block id outside the store");
    const int64_t boundaries = (chunk.first_position + n) / block - chunk.first_position / block;
    if (static_cast<int64_t>(chunk.snapshots.size()) > boundaries)
      return InvalidArgument("more snapshots than block boundaries in the chunk");
    for (int32_t s : chunk.snapshots)
      if (s >= kv.num_snapshots()) return InvalidArgument("snapshot id outside the store");
    if (chunk.restore >= kv.num_snapshots() || (chunk.restore >= 0 && chunk.first_position % block != 0))
      return InvalidArgument("a restore must name a snapshot at a block boundary");
    segments.push_back({&kv, chunk.slot, chunk.blocks, chunk.snapshots, chunk.first_position,
                        static_cast<int64_t>(ids.size()), n});
    ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
    for (int64_t i = 0; i < n; ++i) wanted.push_back(chunk.all_logits || (chunk.needs_logits && i == n - 1));
  }
  for (int32_t id : ids)
    if (id < 0 || id >= config_.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
  for (const ChunkView& chunk : chunks)
    if (chunk.restore >= 0) kv.Restore(chunk.slot, chunk.restore, chunk.first_position);
  return Run(segments, ids, wanted, logits);
}

std::unique_ptr<HostKvPools> Model::CreateKvPools(int64_t block_tokens, int32_t num_slots, int32_t num_blocks,
                                                  int32_t num_snapshots) const {
  return std::make_unique<CpuKvStore>(Geometry(block_tokens), num_slots, num_blocks, num_snapshots);
}

Status Model::Forward(std::span<const ChunkView> chunks, HostKvPools& kv, std::vector<float>* logits) {
  auto* store = dynamic_cast<CpuKvStore*>(&kv);
  if (store == nullptr) return Internal("DeepSeek-V4 on the CPU runs on its own KV pools");
  return Forward(chunks, *store, logits);
}

void RegisterHostModel(HostModelRegistry& registry) {
  registry.Register("deepseek_v4", [](const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint,
                                      int num_threads) -> Result<std::unique_ptr<HostModel>> {
    PG_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Create(config, std::move(checkpoint), num_threads));
    return std::unique_ptr<HostModel>(std::move(model));
  });
}

Status Model::Run(std::span<const Segment> segments, std::span<const int32_t> ids, std::span<const uint8_t> wanted,
                  std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const auto t_n = static_cast<int64_t>(ids.size());
  for (int32_t id : ids)
    if (id < 0 || id >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
  if (t_n == 0) return InvalidArgument("forward called with no tokens");

  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  std::vector<float> streams(static_cast<size_t>(t_n * hc * d));  // [N, hc, D]
  for (int64_t t = 0; t < t_n; ++t)
    for (int64_t i = 0; i < hc; ++i)
      std::copy_n(weights_.embed.f32() + static_cast<int64_t>(ids[static_cast<size_t>(t)]) * d, d,
                  streams.data() + (t * hc + i) * d);

  std::vector<float> x(static_cast<size_t>(t_n * d)), f(x.size());  // [N, D]
  std::vector<float> post(static_cast<size_t>(t_n * hc)), comb(static_cast<size_t>(t_n * hc * hc));
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(i)];
    const bool sliding = c.layer_types[static_cast<size_t>(i)] == AttentionType::kSliding;
    const AttentionContext ctx{c, sliding ? rope_main_ : rope_compress_, pool_};

    HyperConnectionPre(c, lw.hc_attn, streams.data(), t_n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), lw.attn_norm.f32(), x.data(), t_n, d, eps);
    Attention(ctx, lw.attn, i, segments, x.data(), t_n, f.data());
    HyperConnectionPost(c, streams.data(), f.data(), post.data(), comb.data(), t_n);

    HyperConnectionPre(c, lw.hc_ffn, streams.data(), t_n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), lw.ffn_norm.f32(), x.data(), t_n, d, eps);
    Moe(c, pool_, lw.ffn, c.mlp_layer_types[static_cast<size_t>(i)], ids, x.data(), f.data());
    HyperConnectionPost(c, streams.data(), f.data(), post.data(), comb.data(), t_n);
  }

  // Gather the rows that need logits, then one head pass over all of them.
  std::vector<float> head_in;  // [R, hc, D]
  for (int64_t t = 0; t < t_n; ++t)
    if (wanted[static_cast<size_t>(t)])
      head_in.insert(head_in.end(), streams.begin() + t * hc * d, streams.begin() + (t + 1) * hc * d);
  const int64_t rows = static_cast<int64_t>(head_in.size()) / (hc * d);
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  if (rows == 0) return Status::Ok();
  HyperConnectionHead(c, weights_.hc_head, head_in.data(), rows, x.data());
  cpu::RmsNorm(x.data(), weights_.norm.f32(), x.data(), rows, d, eps);
  cpu::Linear(pool_, x.data(), weights_.head.f32(), logits->data(), rows, d, c.vocab_size);
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4
