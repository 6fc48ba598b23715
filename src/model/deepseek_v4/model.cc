#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
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
                                             int num_threads, const ShardSpec& shard,
                                             distributed::Communicator* comm) {
  PG_RETURN_IF_ERROR(ValidateModelConfig(config));
  if (!shard.is_whole() && (comm == nullptr || comm->size() != shard.size || comm->rank() != shard.rank))
    return InvalidArgument("a sharded model needs the communicator of its group, at its rank");
  PG_ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(config, *checkpoint, shard));
  return std::unique_ptr<Model>(new Model(std::move(config), std::move(checkpoint), std::move(weights), num_threads,
                                          shard.is_whole() ? nullptr : comm));
}

Model::Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights, int num_threads,
             distributed::Communicator* comm)
    : config_(std::move(config)),
      comm_(comm),
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

namespace {

// A draft tree's parents: the root first, every node after its parent.
bool ValidTree(std::span<const int32_t> parents) {
  if (parents.empty() || parents[0] != -1) return false;
  for (size_t i = 1; i < parents.size(); ++i)
    if (parents[i] < 0 || static_cast<size_t>(parents[i]) >= i) return false;
  return true;
}

}  // namespace

Status Model::Forward(std::span<const ChunkView> chunks, CpuKvStore& kv, std::vector<float>* logits) {
  std::vector<Segment> segments;
  std::vector<int32_t> ids;
  std::vector<uint8_t> wanted;
  const int64_t block = kv.geometry().block_tokens;
  const KvLayout layout = kv.geometry().Layout();
  bool keep_hidden = false;
  for (const ChunkView& chunk : chunks) {
    const int64_t n = chunk.num_tokens;
    if (n <= 0 || static_cast<int64_t>(chunk.tokens.size()) != n || chunk.feeds_last)
      return InvalidArgument("a CPU step chunk must carry all of its tokens");
    if (chunk.slot < 0 || chunk.slot >= kv.num_slots()) return InvalidArgument("KV slot outside the store");
    const bool tree = !chunk.tree_parents.empty();
    if (tree && (static_cast<int64_t>(chunk.tree_parents.size()) != n || !ValidTree(chunk.tree_parents)))
      return InvalidArgument("a draft tree's parents must start with the root and precede their children");
    if (tree && chunk.restore >= 0) return InvalidArgument("a draft tree cannot restore its slot");
    const int64_t span = chunk.span();
    if (chunk.first_position < 0 || chunk.first_position + span > config_.max_position_embeddings)
      return OutOfRange("sequence longer than max_position_embeddings");
    if (layout.BlocksFor(chunk.first_position + span) > static_cast<int64_t>(chunk.blocks.size()))
      return InvalidArgument("the block table does not cover the chunk");
    for (int32_t b : chunk.blocks)
      if (b < 0 || b >= kv.num_blocks()) return InvalidArgument("block id outside the store");
    const int64_t boundaries = (chunk.first_position + span) / block - chunk.first_position / block;
    if (static_cast<int64_t>(chunk.snapshots.size()) > boundaries)
      return InvalidArgument("more snapshots than block boundaries in the chunk");
    for (int32_t s : chunk.snapshots)
      if (s >= kv.num_snapshots()) return InvalidArgument("snapshot id outside the store");
    if (chunk.restore >= kv.num_snapshots() || (chunk.restore >= 0 && chunk.first_position % block != 0))
      return InvalidArgument("a restore must name a snapshot at a block boundary");
    Segment seg{&kv, chunk.slot, chunk.blocks, tree ? std::span<const int32_t>{} : chunk.snapshots,
                chunk.first_position, static_cast<int64_t>(ids.size()), n};
    seg.parents = chunk.tree_parents;
    segments.push_back(seg);
    ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
    for (int64_t i = 0; i < n; ++i)
      wanted.push_back(tree || chunk.all_logits || (chunk.needs_logits && i == n - 1));
    keep_hidden = keep_hidden || chunk.keep_hidden;
  }
  for (int32_t id : ids)
    if (id < 0 || id >= config_.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
  for (const ChunkView& chunk : chunks) {
    if (chunk.restore >= 0) kv.Restore(chunk.slot, chunk.restore, chunk.first_position);
    if (chunk.tree_parents.empty()) continue;
    CpuKvStore::StagedTree& st = kv.Staged(chunk.slot);
    st.first_position = chunk.first_position;
    st.parents.assign(chunk.tree_parents.begin(), chunk.tree_parents.end());
    st.snapshots.assign(chunk.snapshots.begin(), chunk.snapshots.end());
    st.layers.resize(static_cast<size_t>(config_.num_layers));
  }
  last_streams_.clear();
  last_taps_.clear();
  return Run(segments, ids, wanted, logits, keep_hidden ? &last_streams_ : nullptr,
             keep_hidden && has_block_drafter() ? &last_taps_ : nullptr);
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
                                      const HostModelOptions& o) -> Result<std::unique_ptr<HostModel>> {
    ShardSpec shard;
    if (o.comm != nullptr) shard = {o.comm->rank(), o.comm->size(), o.expert_parallel};
    PG_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config, std::move(checkpoint), o.num_threads, shard, o.comm));
    model->set_kv_cache_fp8(o.kv_cache_fp8);
    return std::unique_ptr<HostModel>(std::move(model));
  });
}

Status Model::SumOverRanks(std::vector<float>& partial) {
  if (comm_ == nullptr) return Status::Ok();
  return comm_->AllReduceSum(partial.data(), static_cast<int64_t>(partial.size()), DType::kF32);
}

Status Model::Head(const float* x, int64_t rows, std::vector<float>* logits) {
  const int64_t d = config_.hidden_size, vocab = config_.vocab_size;
  logits->resize(static_cast<size_t>(rows * vocab));
  if (comm_ == nullptr) {
    cpu::Linear(pool_, x, weights_.head.f32(), logits->data(), rows, d, vocab);
    return Status::Ok();
  }
  // Each rank's part padded to the same width, gathered [ranks, R, part], then laid out by row.
  const int ranks = comm_->size();
  const int64_t part = distributed::PaddedShard(vocab, 0, ranks).size();
  const int64_t mine = weights_.head.view.shape[0];
  std::vector<float> local(static_cast<size_t>(rows * part), 0.0f), gathered(local.size() * static_cast<size_t>(ranks));
  std::vector<float> y(static_cast<size_t>(rows * mine));
  if (mine > 0) cpu::Linear(pool_, x, weights_.head.f32(), y.data(), rows, d, mine);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(y.data() + r * mine, mine, local.data() + r * part);
  PG_RETURN_IF_ERROR(comm_->AllGather(local.data(), gathered.data(), rows * part, DType::kF32));
  for (int k = 0; k < ranks; ++k) {
    const distributed::ShardRange v = distributed::PaddedShard(vocab, k, ranks);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(gathered.data() + (k * rows + r) * part, v.size(), logits->data() + r * vocab + v.begin);
  }
  return Status::Ok();
}

Status Model::RunLayer(const ModelConfig& c, const LayerWeights& lw, int64_t layer, std::span<const Segment> segments,
                       std::span<const int32_t> ids, float* streams, int64_t t_n) {
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  std::vector<float> x(static_cast<size_t>(t_n * d)), f(x.size());  // [N, D]
  std::vector<float> post(static_cast<size_t>(t_n * hc)), comb(static_cast<size_t>(t_n * hc * hc));
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool sliding = c.layer_types[static_cast<size_t>(layer)] == AttentionType::kSliding;
  const AttentionContext ctx{c, sliding ? rope_main_ : rope_compress_, pool_, kv_fp8_rope_dim_};

  HyperConnectionPre(c, lw.hc_attn, streams, t_n, x.data(), post.data(), comb.data());
  cpu::RmsNorm(x.data(), lw.attn_norm.f32(), x.data(), t_n, d, eps);
  Attention(ctx, lw.attn, layer, segments, x.data(), t_n, f.data());
  PG_RETURN_IF_ERROR(SumOverRanks(f));
  HyperConnectionPost(c, streams, f.data(), post.data(), comb.data(), t_n);

  HyperConnectionPre(c, lw.hc_ffn, streams, t_n, x.data(), post.data(), comb.data());
  cpu::RmsNorm(x.data(), lw.ffn_norm.f32(), x.data(), t_n, d, eps);
  Moe(c, pool_, lw.ffn, c.mlp_layer_types[static_cast<size_t>(layer)], ids, x.data(), f.data());
  PG_RETURN_IF_ERROR(SumOverRanks(f));
  HyperConnectionPost(c, streams, f.data(), post.data(), comb.data(), t_n);
  return Status::Ok();
}

Status Model::Run(std::span<const Segment> segments, std::span<const int32_t> ids, std::span<const uint8_t> wanted,
                  std::vector<float>* logits, std::vector<float>* final_streams, std::vector<float>* taps) {
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
  const auto num_taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  if (taps != nullptr) taps->assign(static_cast<size_t>(t_n * num_taps * d), 0.0f);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    PG_RETURN_IF_ERROR(RunLayer(c, weights_.layers[static_cast<size_t>(i)], i, segments, ids, streams.data(), t_n));
    if (taps == nullptr) continue;
    for (int64_t k = 0; k < num_taps; ++k)
      if (c.dspark_target_layer_ids[static_cast<size_t>(k)] == i)
        StreamMean(c, streams.data(), t_n, taps->data() + k * d, num_taps * d);
  }
  if (final_streams != nullptr) *final_streams = streams;

  // Gather the rows that need logits, then one head pass over all of them.
  std::vector<float> head_in;  // [R, hc, D]
  for (int64_t t = 0; t < t_n; ++t)
    if (wanted[static_cast<size_t>(t)])
      head_in.insert(head_in.end(), streams.begin() + t * hc * d, streams.begin() + (t + 1) * hc * d);
  const int64_t rows = static_cast<int64_t>(head_in.size()) / (hc * d);
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  if (rows == 0) return Status::Ok();
  std::vector<float> x(static_cast<size_t>(rows * d));
  HyperConnectionHead(c, weights_.hc_head, head_in.data(), rows, x.data());
  cpu::RmsNorm(x.data(), weights_.norm.f32(), x.data(), rows, d, static_cast<float>(c.rms_norm_eps));
  return Head(x.data(), rows, logits);
}

Status Model::MtpLogits(std::span<const int32_t> tokens, std::vector<float>* logits) {
  if (weights_.mtp.empty()) return Unimplemented("the checkpoint has no MTP layer");
  const auto t_n = static_cast<int64_t>(tokens.size());
  if (t_n < 2) return InvalidArgument("MTP logits need at least 2 tokens");
  if (t_n > config_.max_position_embeddings) return OutOfRange("sequence longer than max_position_embeddings");
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;

  // The main model over the whole sequence, keeping its final streams.
  SequenceState main = NewSequence();
  const Segment whole{main.kv.get(), 0, main.blocks, {}, 0, 0, t_n};
  const std::vector<uint8_t> none(static_cast<size_t>(t_n), 0);
  std::vector<float> streams, unused;
  PG_RETURN_IF_ERROR(Run(std::span(&whole, 1), tokens, none, &unused, &streams));

  // Its layer on a state of its own, over pairs (stream at t, token t + 1).
  const int64_t n = t_n - 1;
  std::vector<const float*> h(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) h[static_cast<size_t>(t)] = streams.data() + t * hc * d;
  SequenceState mtp = SequenceState::Create(MtpLayerConfig(c));
  const Segment seg{mtp.kv.get(), 0, mtp.blocks, {}, 0, 0, n};
  const std::vector<uint8_t> all(static_cast<size_t>(n), 1);
  std::vector<float> out;
  return MtpRun(std::span(&seg, 1), h, tokens.subspan(1), all, &out, logits);
}

Status Model::MtpRun(std::span<const Segment> segments, std::span<const float* const> h,
                     std::span<const int32_t> next, std::span<const uint8_t> wanted, std::vector<float>* out_streams,
                     std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const MtpWeights& m = weights_.mtp.front();
  const auto n = static_cast<int64_t>(next.size());
  // Pair t: h_proj(hnorm(stream_j)) + e_proj(enorm(embed(next token))) on every stream j.
  std::vector<float> e(static_cast<size_t>(n * d)), en(e.size());
  for (int64_t t = 0; t < n; ++t)
    std::copy_n(weights_.embed.f32() + static_cast<int64_t>(next[static_cast<size_t>(t)]) * d, d, e.data() + t * d);
  cpu::RmsNorm(e.data(), m.enorm.f32(), en.data(), n, d, eps);
  cpu::Linear(pool_, en.data(), m.e_proj.f32(), e.data(), n, d, d);
  std::vector<float> hs(static_cast<size_t>(n * hc * d));
  for (int64_t t = 0; t < n; ++t) std::copy_n(h[static_cast<size_t>(t)], hc * d, hs.data() + t * hc * d);
  std::vector<float>& x = *out_streams;
  x.assign(hs.size(), 0.0f);
  cpu::RmsNorm(hs.data(), m.hnorm.f32(), hs.data(), n * hc, d, eps);
  cpu::Linear(pool_, hs.data(), m.h_proj.f32(), x.data(), n * hc, d, d);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < hc; ++j)
      for (int64_t k = 0; k < d; ++k) x[static_cast<size_t>((t * hc + j) * d + k)] += e[static_cast<size_t>(t * d + k)];

  // Its decoder layer (one window-attention layer), then its head mixer and norm and the
  // main model's head over the wanted pairs.
  PG_RETURN_IF_ERROR(RunLayer(MtpLayerConfig(c), m.layer, 0, segments, next, x.data(), n));
  std::vector<float> head_in;
  for (int64_t t = 0; t < n; ++t)
    if (wanted[static_cast<size_t>(t)]) head_in.insert(head_in.end(), x.begin() + t * hc * d, x.begin() + (t + 1) * hc * d);
  const int64_t rows = static_cast<int64_t>(head_in.size()) / (hc * d);
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  if (rows == 0) return Status::Ok();
  std::vector<float> y(static_cast<size_t>(rows * d));
  HyperConnectionHead(c, m.hc_head, head_in.data(), rows, y.data());
  cpu::RmsNorm(y.data(), m.norm.f32(), y.data(), rows, d, eps);
  return Head(y.data(), rows, logits);
}

}  // namespace peregrine::deepseek_v4
