#include "model/deepseek_v4/cuda/cuda_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device.h"
#include "backend/cuda/ops/embedding.h"
#include "backend/cuda/ops/hyper_connection.h"
#include "backend/cuda/ops/kv_copy.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/step_feed.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "distributed/communicator.h"
#include "distributed/parallel_config.h"
#include "kernels/indexer_scores.cuh"
#include "kernels/indexer_topk.cuh"
#include "kernels/common/kv_fp8_row.h"
#include "model/deepseek_v4/cuda/cuda_model_impl.h"
#include "model/deepseek_v4/rope.h"

namespace peregrine::deepseek_v4::cuda {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kMhc: return "mhc";
    case OpKind::kNorm: return "norms";
    case OpKind::kProjection: return "projections";
    case OpKind::kRope: return "rope";
    case OpKind::kCompressor: return "compressor";
    case OpKind::kIndexer: return "indexer";
    case OpKind::kTopK: return "indexer_topk";
    case OpKind::kAttention: return "attention";
    case OpKind::kOutputProjection: return "output_projection";
    case OpKind::kWindowUpdate: return "window_update";
    case OpKind::kRouter: return "router";
    case OpKind::kMoeExperts: return "moe_experts";
    case OpKind::kSharedExpert: return "shared_expert";
    case OpKind::kHead: return "head";
    case OpKind::kCollective: return "collective";
    case OpKind::kCount: return "?";
  }
  return "?";
}

namespace {

bool BuiltAttention(int64_t heads, int64_t dim) {
  for (const auto& c : kernels::kSparseAttentionConfigs)
    if (c.heads == heads && c.head_dim == dim) return true;
  return false;
}

bool BuiltIndexer(int64_t heads, int64_t dim) {
  for (const auto& c : kernels::kIndexerScoresConfigs)
    if (c.heads == heads && c.dim == dim) return true;
  return false;
}

}  // namespace

Status CudaModel::Impl::Allocate(cudaStream_t load_stream) {
  const ModelConfig& c = config;
  const DeviceModelLimits& o = limits;
  const int64_t n = o.max_tokens;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  const int64_t hd = c.head_dim;
  auto alloc = [&](DType dtype, Shape shape, DeviceTensor* out) { return AllocateTensor(dtype, shape, out); };
  // RoPE tables up to the state's context.
  const int64_t half = c.rope_head_dim / 2;
  for (int table = 0; table < 2; ++table) {
    const RopeTable rope(table == 0 ? c.rope_main : c.rope_compress, c.rope_head_dim);
    std::vector<float> cos(static_cast<size_t>(o.max_context * half)), sin(cos.size());
    for (int64_t p = 0; p < o.max_context; ++p) rope.Angles(p, cos.data() + p * half, sin.data() + p * half);
    DeviceTensor& dc = table == 0 ? main_cos : compress_cos;
    DeviceTensor& ds = table == 0 ? main_sin : compress_sin;
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {o.max_context, half}, &dc));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {o.max_context, half}, &ds));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(dc.view.data, cos.data(), cos.size() * 4, cudaMemcpyHostToDevice));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(ds.view.data, sin.data(), sin.size() * 4, cudaMemcpyHostToDevice));
  }

  // Compressed entries a sequence can have (the indexer's score rows).
  max_entries_csa = c.compress_ratio_csa > 0 ? o.max_context / c.compress_ratio_csa + 1 : 1;
  max_entries_hca = c.compress_ratio_hca > 0 ? o.max_context / c.compress_ratio_hca + 1 : 1;

  // Workspace.
  Workspace& x = ws;
  // This rank's parts of the split dimensions (all whole unsharded).
  const int64_t h = weights.heads;
  const int64_t ih = c.index_n_heads;
  const int64_t id = c.index_head_dim;
  const int64_t e = weights.experts;
  const int64_t k = c.num_experts_per_tok;
  const int64_t inter = weights.layers.empty() ? c.moe_intermediate_size : weights.layers[0].experts.w1.view.shape[1];
  const int64_t shared = weights.layers.empty() ? c.moe_intermediate_size * c.num_shared_experts
                                                : weights.layers[0].shared_w2.w.view.shape[1];
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc, d}, &x.streams));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, d}, &x.x));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc}, &x.post));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc, hc}, &x.comb));
  PG_RETURN_IF_ERROR(alloc(DType::kF32,
                           {std::max(pc::HyperConnectionWorkspaceFloats(n, hc, d, (2 + hc) * hc, o.batch_invariant),
                                     pc::HyperConnectionWorkspaceFloats(n, hc, d, hc, o.batch_invariant))},
                           &x.hc_workspace));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, d}, &x.f));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, c.q_lora_rank}, &x.qr));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, c.q_lora_rank}, &x.qr_n));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, h * hd}, &x.q));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, h, hd}, &x.q_n));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hd}, &x.kv));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {2, n, 2 * hd}, &x.ckv));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {2, n, 2 * id}, &x.ikv));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, ih, id}, &x.iq));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, ih}, &x.iw));
  index_batch = std::min<int64_t>(n, kernels::kIndexerMaxBatch);
  score_stride = (max_entries_csa + 3) / 4 * 4;
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {index_batch, score_stride}, &x.scores));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {n, std::max<int64_t>(c.index_topk, 1)}, &x.topk));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {n}, &x.topk_counts));
  if (score_stride > kernels::kIndexerTopKShortRow) {
    // Long rows' candidate lists; the top-k leaves its counters zero after every call.
    PG_RETURN_IF_ERROR(alloc(DType::kI32, {index_batch, kernels::kIndexerTopKWorkspaceInts}, &x.topk_workspace));
    PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x.topk_workspace.view.data, 0, x.topk_workspace.buffer.bytes(), load_stream));
  }
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, h, hd}, &x.o));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, weights.groups, c.o_lora_rank}, &x.mid));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, c.num_experts}, &x.router_logits));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {n, k}, &x.topk_ids));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, k}, &x.topk_weights));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {e + 1}, &x.expert_offsets));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {n * k}, &x.sorted_assignments));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n * k, inter}, &x.expert_h));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n * k, d}, &x.expert_y));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, 2 * shared}, &x.shared_gate_up));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, shared}, &x.shared_h));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, d}, &x.shared_y));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {o.max_logit_rows, d}, &x.head_x));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {o.max_logit_rows, c.vocab_size}, &x.logits));
  if (parallel.size > 1) {
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {o.max_logit_rows, weights.head_rows}, &x.head_logits));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {parallel.size, o.max_logit_rows, weights.head_rows}, &x.gathered_logits));
  }

  // Speculative verify: each node's staging rows, per compressed layer.
  if (o.max_verify_rows > 0) {
    const int64_t v = o.max_verify_rows;
    stages.clear();
    stages.resize(geometry.layers.size());
    int64_t compressed = 0;
    for (size_t i = 0; i < geometry.layers.size(); ++i) {
      const KvGeometry::Layer& l = geometry.layers[i];
      if (l.ratio == 0) continue;
      ++compressed;
      const bool is_csa = l.csa_index >= 0;
      const int64_t width = (is_csa ? 2 : 1) * hd;
      PG_RETURN_IF_ERROR(alloc(DType::kF32, {v, width}, &stages[i].kv));
      PG_RETURN_IF_ERROR(alloc(DType::kF32, {v, width}, &stages[i].gate));
      PG_RETURN_IF_ERROR(limits.kv_cache_fp8 ? alloc(DType::kU8, {v, geometry.entry_bytes()}, &stages[i].entries)
                                             : alloc(DType::kBF16, {v, hd}, &stages[i].entries));
      if (is_csa) {
        PG_RETURN_IF_ERROR(alloc(DType::kF32, {v, 2 * id}, &stages[i].index_kv));
        PG_RETURN_IF_ERROR(alloc(DType::kF32, {v, 2 * id}, &stages[i].index_gate));
        PG_RETURN_IF_ERROR(alloc(DType::kBF16, {v, id}, &stages[i].index_keys));
      }
    }
    // A kept node moves one window row per layer, and per compressed layer up to four ring
    // rows and two entries.
    const int64_t per_row = static_cast<int64_t>(geometry.layers.size()) + 6 * compressed;
    PG_RETURN_IF_ERROR(alloc(DType::kU8, {v * per_row, static_cast<int64_t>(sizeof(kernels::KvCopySegment))},
                             &commit_segments));
    PG_RETURN_IF_ERROR(alloc(DType::kU8, {8}, &commit_checksum));
  }

  fast_attention = BuiltAttention(h, hd);
  fast_indexer = BuiltIndexer(ih, id);
  if (fast_attention) {
    PG_RETURN_IF_ERROR(pc::PrepareSparseAttention());
    attention_layout = pc::SparseAttentionLayout(o.num_sms, static_cast<int>(n));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {attention_layout.max_segments, h, hd}, &x.partial_o));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {attention_layout.max_segments, h}, &x.partial_lse));
  }

  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(load_stream));
  return Status::Ok();
}

Status CudaModel::Impl::AllocateTensor(DType dtype, Shape shape, DeviceTensor* out) {
  const size_t bytes = DTypeBytes(dtype, static_cast<size_t>(shape.numel()));
  PG_ASSIGN_OR_RETURN(out->buffer, allocator->Allocate(std::max<size_t>(bytes, 16)));
  out->view = Tensor::Contiguous(out->buffer.data(), dtype, shape, Device::kCuda);
  return Status::Ok();
}

Tensor CudaModel::Impl::MetaView(int64_t offset, Shape shape) const { return meta->DeviceView(offset, shape); }

Tensor CudaModel::Impl::BlockTables() const {
  return Tensor::Contiguous(pools.block_tables, DType::kI32, {pools.num_slots, std::max<int64_t>(pools.max_blocks, 1)},
                            Device::kCuda);
}

Status CudaModel::Impl::EnqueueStep(int64_t rows, int64_t chunks, int64_t logit_rows) {
  const ModelConfig& c = config;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  PG_RETURN_IF_ERROR(Op(OpKind::kEmbedding, [&] {
    pc::EmbeddingArgs a;
    a.token_ids = MetaView(layout.token_ids, {rows});
    a.table = weights.embed.view;
    a.streams = View(ws.streams, DType::kF32, {rows, hc, d});
    return pc::EmbeddingLookup(a, stream);
  }));
  const auto num_taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    PG_RETURN_IF_ERROR(EnqueueLayer(i, rows, chunks));
    if (!block.has_value()) continue;
    // The block drafter's taps: this layer's lane means of every row, at its column block.
    for (int64_t k = 0; k < num_taps; ++k) {
      if (c.dspark_target_layer_ids[static_cast<size_t>(k)] != i) continue;
      PG_RETURN_IF_ERROR(Op(OpKind::kMhc, [&] {
        return pc::HyperConnectionLaneMean(
            {View(ws.streams, DType::kF32, {rows, hc, d}), View(taps, DType::kBF16, {rows, num_taps * d}), k * d}, stream);
      }));
    }
  }
  if (logit_rows == 0) return Status::Ok();
  return EnqueueHead(rows, logit_rows);
}

Result<cudaStream_t> CudaModel::Impl::Fork(int64_t rows) {
  if (profiler != nullptr || rows > kBranchMaxRows) return stream;
  // Only while capturing: a graph replays its branches for free, while an eager step would pay
  // the host's event calls at every fork and join.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PG_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusActive) return stream;
  PG_RETURN_IF_ERROR(Order(stream, branch_stream.get(), fork_event));
  return branch_stream.get();
}

Status CudaModel::Impl::Order(cudaStream_t from, cudaStream_t to, pc::Event& event) {
  if (from == to) return Status::Ok();
  PG_RETURN_IF_ERROR(event.Record(from));
  PG_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(to, event.get(), 0));
  return Status::Ok();
}

Status CudaModel::Impl::SumOverRanks(void* data, int64_t count) {
  if (parallel.size <= 1) return Status::Ok();
  return Op(OpKind::kCollective, [&] { return parallel.comm->AllReduceSum(data, count, DType::kBF16); });
}

namespace {

// Token ids known on the host (a fed chunk's last token is not).
Status CheckTokens(const ModelConfig& c, std::span<const ChunkView> chunks) {
  for (const ChunkView& chunk : chunks)
    for (int32_t id : chunk.tokens)
      if (id < 0 || id >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
  return Status::Ok();
}

}  // namespace

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

const ModelConfig& CudaModel::config() const { return impl_->config; }
uint64_t CudaModel::weight_bytes() const { return impl_->weights.bytes; }
const KvGeometry& CudaModel::geometry() const { return impl_->geometry; }

Result<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                     const DeviceModelLimits& limits,
                                                     const WeightLoadOptions& weight_options,
                                                     pc::CachingAllocator& allocator, cudaStream_t stream,
                                                     const DeviceParallel& parallel) {
  PG_RETURN_IF_ERROR(ValidateModelConfig(config));
  if (parallel.size > 1 && (parallel.comm == nullptr || parallel.comm->size() != parallel.size ||
                            parallel.comm->rank() != parallel.rank))
    return InvalidArgument("CUDA model: a sharded model needs its group's communicator (rank and size as its own)");
  if (limits.max_tokens < 1 || limits.max_context < 2 || limits.max_logit_rows < 1)
    return InvalidArgument("CUDA model: max_tokens and max_logit_rows must be >= 1 and max_context >= 2");
  if (limits.max_context > config.max_position_embeddings)
    return InvalidArgument("CUDA model: max_context exceeds the model's max_position_embeddings");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->limits = limits;
  // --kv-cache-dtype fp8: the fused norm rounds KV rows and the attention reads FP8 entries in
  // whole 8-value pieces.
  if (limits.kv_cache_fp8 && (config.rope_head_dim % 8 != 0 || (config.head_dim - config.rope_head_dim) % 8 != 0))
    return InvalidArgument("CUDA model: --kv-cache-dtype fp8 needs head_dim and qk_rope_head_dim multiples of 8");
  const int64_t entry_row =
      limits.kv_cache_fp8
          ? kernels::KvFp8RowLayout{static_cast<int>(config.head_dim), static_cast<int>(config.rope_head_dim)}.row_bytes()
          : 0;
  impl->geometry = KvGeometry::For(config, limits.block_tokens, KvElementSizes{2, 2, entry_row});
  impl->allocator = &allocator;
  impl->parallel = parallel;
  WeightLoadOptions w = weight_options;
  w.shard = ShardSpec{parallel.rank, parallel.size, parallel.expert_parallel};
  PG_ASSIGN_OR_RETURN(impl->blas, pc::Blas::Create(allocator));
  impl->blas.set_batch_invariant(limits.batch_invariant);
  PG_ASSIGN_OR_RETURN(impl->branch_stream, pc::Stream::Create());
  PG_ASSIGN_OR_RETURN(impl->branch_blas, pc::Blas::Create(allocator, size_t{4} << 20));
  impl->branch_blas.set_batch_invariant(limits.batch_invariant);
  PG_ASSIGN_OR_RETURN(impl->fork_event, pc::Event::Create(false));
  PG_ASSIGN_OR_RETURN(impl->ready_event, pc::Event::Create(false));
  PG_ASSIGN_OR_RETURN(impl->join_event, pc::Event::Create(false));
  PG_ASSIGN_OR_RETURN(impl->weights, LoadDeviceWeights(impl->config, checkpoint, w, allocator, stream));
  if (limits.max_draft_steps > 0) {
    if (parallel.size > 1) return InvalidArgument("CUDA model: the drafter runs on one GPU only");
    if (limits.max_verify_rows <= 0) return InvalidArgument("CUDA model: a drafter needs verify rows");
    // Without a drafter in the checkpoint the model has none (has_drafter() says so). A config
    // with DSpark's keys names a block drafter; otherwise the drafter is the MTP layer.
    auto keep = [&](auto loaded, auto& into) -> Status {
      if (!loaded.ok()) return loaded.status().code() == StatusCode::kNotFound ? Status::Ok() : loaded.status();
      impl->weights.bytes += loaded->bytes;
      into.emplace(std::move(loaded).value());
      return Status::Ok();
    };
    PG_RETURN_IF_ERROR(impl->config.has_block_drafter()
                           ? keep(LoadDeviceBlockDrafter(impl->config, checkpoint, w, allocator, stream), impl->block)
                           : keep(LoadDeviceMtp(impl->config, checkpoint, w, allocator, stream), impl->mtp));
  }
  PG_RETURN_IF_ERROR(impl->Allocate(stream));
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

KvLayout CudaModel::kv_layout() const {
  const Impl& m = *impl_;
  KvLayout layout = m.geometry.Layout();
  // The window pool also holds each layer's rows of the step being run, after the rings.
  for (KvKind& k : layout.per_request)
    if (k.name == "window")
      k.fixed_bytes = static_cast<int64_t>(m.geometry.layers.size()) * m.limits.max_tokens * m.geometry.head_dim * 2;
  // The drafter's windows: per layer of it (the MTP layer, or each block-drafter stage) a ring
  // per slot and its step rows, as the main layers' windows.
  if (const int64_t layers = m.drafter_layers(); layers > 0)
    layout.per_request.push_back({"mtp_window", layers * m.geometry.window * m.geometry.head_dim * 2,
                                  layers * m.limits.max_tokens * m.geometry.head_dim * 2});
  return layout;
}

Status CudaModel::BindKv(const DeviceKvPools& pools) {
  Impl& m = *impl_;
  const KvGeometry& g = m.geometry;
  const KvLayout layout = kv_layout();
  if (pools.paged.size() != layout.paged.size() || pools.per_request.size() != layout.per_request.size())
    return InvalidArgument("KV pools do not match the model's layout");
  if (pools.num_blocks > 0 && pools.block_tables == nullptr) return InvalidArgument("KV pools without block tables");
  m.pools = pools;
  const int64_t slots = pools.num_slots;
  const int64_t blocks = pools.num_blocks;
  const int64_t w = g.window, hd = g.head_dim, id = g.index_dim;
  m.window_layer_rows = slots * w + m.limits.max_tokens;
  auto paged = [&](const char* name) -> char* {
    for (size_t i = 0; i < layout.paged.size(); ++i)
      if (layout.paged[i].name == name) return static_cast<char*>(pools.paged[i]);
    return nullptr;
  };
  char* window = static_cast<char*>(pools.per_request[0]);
  float* rings = static_cast<float*>(pools.per_request[1]);
  char* csa_entries = paged("csa_entries");
  char* csa_keys = paged("csa_index_keys");
  char* hca_entries = paged("hca_entries");
  // Compressor rings, array by array, layer-major inside each (so a slot's rows of one array
  // sit at one pitch across the layers): CSA kv, gate, indexer kv, indexer gate; HCA kv, gate.
  int64_t csa_ratio = 0, hca_ratio = 0;
  for (const KvGeometry::Layer& l : g.layers) {
    if (l.csa_index >= 0) csa_ratio = l.ratio;
    else if (l.ratio > 0) hca_ratio = l.ratio;
  }
  const int64_t csa_ring = g.RingFloats(csa_ratio, 2, hd), index_ring = g.RingFloats(csa_ratio, 2, id);
  const int64_t hca_ring = g.RingFloats(hca_ratio, 1, hd);
  float* csa_kv = rings;
  float* csa_gate = csa_kv + g.num_csa * slots * csa_ring;
  float* idx_kv = csa_gate + g.num_csa * slots * csa_ring;
  float* idx_gate = idx_kv + g.num_csa * slots * index_ring;
  float* hca_kv = idx_gate + g.num_csa * slots * index_ring;
  float* hca_gate = hca_kv + g.num_hca * slots * hca_ring;
  m.snapshot_floats = layout.snapshot_bytes / 4;
  float* tails = pools.snapshots != nullptr
                     ? reinterpret_cast<float*>(static_cast<char*>(pools.snapshots) + g.snapshot_window_bytes())
                     : nullptr;
  const int64_t tail_kv = csa_ratio * 2 * hd, tail_index = csa_ratio * 2 * id;
  // Layer c's part of an entries pool: [blocks, P, Dh] bf16, or [blocks, P, row bytes] u8 FP8 rows.
  const int64_t entry_bytes = g.entry_bytes();
  auto entries = [&](char* pool, int64_t c, int64_t per_page) {
    const bool fp8 = m.limits.kv_cache_fp8;
    return Tensor::Contiguous(pool + c * blocks * per_page * entry_bytes, fp8 ? DType::kU8 : DType::kBF16,
                              {std::max<int64_t>(blocks, 1), per_page, fp8 ? entry_bytes : hd}, Device::kCuda);
  };
  m.kv.assign(g.layers.size(), LayerKv{});
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const KvGeometry::Layer& l = g.layers[i];
    LayerKv& k = m.kv[i];
    k.window = Tensor::Contiguous(window + static_cast<int64_t>(i) * m.window_layer_rows * hd * 2, DType::kBF16,
                                  {m.window_layer_rows, hd}, Device::kCuda);
    if (l.ratio == 0) continue;
    const int64_t c = l.cache_index;
    if (l.csa_index >= 0) {
      k.kv_ring = Tensor::Contiguous(csa_kv + c * slots * csa_ring, DType::kF32, {slots, 2 * l.ratio, 2 * hd}, Device::kCuda);
      k.gate_ring = Tensor::Contiguous(csa_gate + c * slots * csa_ring, DType::kF32, {slots, 2 * l.ratio, 2 * hd},
                                       Device::kCuda);
      k.index_kv_ring =
          Tensor::Contiguous(idx_kv + c * slots * index_ring, DType::kF32, {slots, 2 * l.ratio, 2 * id}, Device::kCuda);
      k.index_gate_ring =
          Tensor::Contiguous(idx_gate + c * slots * index_ring, DType::kF32, {slots, 2 * l.ratio, 2 * id}, Device::kCuda);
      k.cache = entries(csa_entries, c, l.entries_per_page);
      k.index_keys = Tensor::Contiguous(csa_keys + c * blocks * l.entries_per_page * id * 2, DType::kBF16,
                                        {std::max<int64_t>(blocks, 1), l.entries_per_page, id}, Device::kCuda);
      if (tails != nullptr) {
        // Tails array-major across the CSA layers: kv [csa][ratio][2Dh], gate, indexer kv, indexer gate.
        k.tail_kv = tails + c * tail_kv;
        k.tail_gate = tails + g.num_csa * tail_kv + c * tail_kv;
        k.tail_index_kv = tails + 2 * g.num_csa * tail_kv + c * tail_index;
        k.tail_index_gate = tails + 2 * g.num_csa * tail_kv + g.num_csa * tail_index + c * tail_index;
      }
    } else {
      k.kv_ring = Tensor::Contiguous(hca_kv + c * slots * hca_ring, DType::kF32, {slots, l.ratio, hd}, Device::kCuda);
      k.gate_ring = Tensor::Contiguous(hca_gate + c * slots * hca_ring, DType::kF32, {slots, l.ratio, hd}, Device::kCuda);
      k.cache = entries(hca_entries, c, l.entries_per_page);
    }
  }
  if (m.drafts()) {
    char* mtp_window = nullptr;
    for (size_t i = 0; i < layout.per_request.size(); ++i)
      if (layout.per_request[i].name == "mtp_window") mtp_window = static_cast<char*>(pools.per_request[i]);
    if (mtp_window == nullptr) return InvalidArgument("KV pools without the drafter's window");
    m.drafter_kv.assign(static_cast<size_t>(m.drafter_layers()), LayerKv{});
    for (size_t s = 0; s < m.drafter_kv.size(); ++s)
      m.drafter_kv[s].window = Tensor::Contiguous(mtp_window + static_cast<int64_t>(s) * m.window_layer_rows * hd * 2,
                                                  DType::kBF16, {m.window_layer_rows, hd}, Device::kCuda);
    PG_RETURN_IF_ERROR(m.AllocateDrafter());
  }
  m.bound = true;
  return Status::Ok();
}

int64_t CudaModel::meta_capacity(int64_t rows, int64_t chunks) const {
  const Impl& m = *impl_;
  const int64_t w = m.config.sliding_window;
  const int64_t padded = std::max(rows, chunks);
  const int64_t schedule_ints = m.fast_attention ? m.attention_layout.num_ints() : 0;
  const int64_t snapshots = MaxSnapshotsPerChunk(m.limits.max_tokens, m.geometry.block_tokens);
  // Tree tables (steps that verify): per row its staging row, path and two staged tables.
  int64_t tree_ints = 0;
  if (m.limits.max_verify_rows > 0) {
    const int64_t l = m.limits.max_tree_depth + 1;
    const int64_t csa = m.config.compress_ratio_csa > 0 ? l / m.config.compress_ratio_csa + 1 : 1;
    const int64_t hca = m.config.compress_ratio_hca > 0 ? l / m.config.compress_ratio_hca + 1 : 1;
    tree_ints = rows * (l + 3 + csa + hca) + 6 * 16;
  }
  return rows * (w + 9) + 5 * (padded + 1) + padded * snapshots + 3 * schedule_ints + tree_ints + 68;
}

Result<DeviceStep> CudaModel::Plan(std::span<const ChunkView> chunks, int64_t rows, StepMeta& meta) {
  Impl& m = *impl_;
  if (!m.bound) return Internal("CUDA model: a step before the KV pools were bound");
  PG_RETURN_IF_ERROR(CheckTokens(m.config, chunks));
  const KvLayout layout = m.geometry.Layout();
  StepLimits limits;
  limits.num_slots = m.pools.num_slots;
  limits.max_tokens = m.limits.max_tokens;
  limits.max_context = m.limits.max_context;
  limits.block_tokens = m.geometry.block_tokens;
  limits.num_blocks = m.pools.num_blocks;
  limits.num_snapshots = m.pools.num_snapshots;
  limits.first_entry_tokens = layout.first_entry_tokens;
  limits.max_stage_rows = m.limits.max_verify_rows;
  limits.max_tree_depth = m.limits.max_tree_depth;
  // A step replaces the last one's trees: one not committed by now leaves its slot unusable
  // (the runner commits before it plans again).
  m.trees.clear();
  PG_ASSIGN_OR_RETURN(StepPlan plan, PlanStep(chunks, m.config, limits));
  for (const ChunkView& chunk : chunks)
    if (layout.BlocksFor(chunk.first_position + chunk.span()) > m.pools.max_blocks)
      return InvalidArgument("a sequence longer than the block tables hold");
  const int64_t r = static_cast<int64_t>(plan.logit_rows.size());
  if (r > m.limits.max_logit_rows)
    return InvalidArgument("step wants " + std::to_string(r) + " logits rows; the model holds " +
                           std::to_string(m.limits.max_logit_rows));
  if (rows < plan.num_tokens || rows > m.limits.max_tokens) return Internal("CUDA model: step rows out of range");
  PG_ASSIGN_OR_RETURN(DeviceStep step, m.WritePlan(plan, rows, meta));
  m.last_step_rows = rows;
  for (const StepPlan::Verify& v : plan.verify_chunks) {
    const ChunkView& chunk = chunks[static_cast<size_t>(v.chunk)];
    VerifiedTree tree;
    tree.slot = chunk.slot;
    tree.first_position = chunk.first_position;
    tree.first_row = v.first_row;
    tree.first_stage_row = v.first_stage_row;
    tree.parents.assign(chunk.tree_parents.begin(), chunk.tree_parents.end());
    tree.blocks.assign(chunk.blocks.begin(), chunk.blocks.end());
    m.trees.push_back(std::move(tree));
  }
  return step;
}

Result<DeviceStep> CudaModel::Impl::WritePlan(const StepPlan& plan, int64_t rows, StepMeta& meta) {
  Impl& m = *this;
  const int64_t r = static_cast<int64_t>(plan.logit_rows.size());
  const int64_t w = m.config.sliding_window;
  const int64_t n_chunks = plan.num_chunks;
  const int64_t padded_chunks = std::max(rows, n_chunks);
  MetaLayout& ml = m.layout;
  auto place = [&](int64_t count) -> Result<int64_t> {
    const int64_t at = meta.Place(count);
    if (at < 0) return Internal("step metadata exceeds its buffer");
    return at;
  };
  PG_ASSIGN_OR_RETURN(ml.token_ids, place(rows));
  PG_ASSIGN_OR_RETURN(ml.positions, place(rows));
  PG_ASSIGN_OR_RETURN(ml.token_slots, place(rows));
  PG_ASSIGN_OR_RETURN(ml.window_indices, place(rows * w));
  PG_ASSIGN_OR_RETURN(ml.window_lengths, place(rows));
  PG_ASSIGN_OR_RETURN(ml.ring_src, place(rows));
  PG_ASSIGN_OR_RETURN(ml.ring_dst, place(rows));
  PG_ASSIGN_OR_RETURN(ml.csa_entries, place(rows));
  PG_ASSIGN_OR_RETURN(ml.hca_entries, place(rows));
  PG_ASSIGN_OR_RETURN(ml.chunk_offsets, place(padded_chunks + 1));
  PG_ASSIGN_OR_RETURN(ml.chunk_positions, place(padded_chunks));
  PG_ASSIGN_OR_RETURN(ml.chunk_slots, place(padded_chunks));
  PG_ASSIGN_OR_RETURN(ml.logit_rows, place(std::max<int64_t>(rows, 1)));
  ml.max_snapshots = plan.max_snapshots;
  PG_ASSIGN_OR_RETURN(ml.snapshot_table, place(padded_chunks * plan.max_snapshots));
  PG_ASSIGN_OR_RETURN(ml.compress_slots, place(padded_chunks));
  // Tree tables only in steps that verify trees (graph steps verify in every step of their
  // key or in none, so their offsets still depend on the bucket alone).
  const bool trees = !plan.verify_chunks.empty();
  ml.path_capacity = plan.path_capacity;
  ml.csa_staged_capacity = plan.csa_staged_capacity;
  ml.hca_staged_capacity = plan.hca_staged_capacity;
  ml.tree_rows = ml.tree_paths = ml.csa_staged_first = ml.csa_staged = ml.hca_staged_first = ml.hca_staged = -1;
  if (trees) {
    PG_ASSIGN_OR_RETURN(ml.tree_rows, place(rows));
    PG_ASSIGN_OR_RETURN(ml.tree_paths, place(rows * plan.path_capacity));
    PG_ASSIGN_OR_RETURN(ml.csa_staged_first, place(rows));
    PG_ASSIGN_OR_RETURN(ml.csa_staged, place(rows * std::max<int64_t>(plan.csa_staged_capacity, 1)));
    PG_ASSIGN_OR_RETURN(ml.hca_staged_first, place(rows));
    PG_ASSIGN_OR_RETURN(ml.hca_staged, place(rows * std::max<int64_t>(plan.hca_staged_capacity, 1)));
  }
  const int64_t schedule_ints = m.fast_attention ? m.attention_layout.num_ints() : 0;
  for (int64_t& section : ml.schedules) {
    PG_ASSIGN_OR_RETURN(const int64_t at, place(schedule_ints));
    section = at;
  }

  // Real rows first, then padding rows that every kernel skips (no window rows, no
  // entries, negative positions, no ring update, no snapshot).
  auto copy = [&](int64_t offset, const std::vector<int32_t>& v, int64_t count, int32_t pad) {
    int32_t* h = meta.host(offset);
    std::copy(v.begin(), v.end(), h);
    std::fill(h + static_cast<int64_t>(v.size()), h + count, pad);
  };
  const int64_t n = plan.num_tokens;
  copy(ml.token_ids, plan.token_ids, rows, 0);
  copy(ml.positions, plan.positions, rows, -1);
  copy(ml.token_slots, plan.token_slots, rows, 0);
  copy(ml.window_indices, plan.window_indices, rows * w, -1);
  copy(ml.window_lengths, plan.window_lengths, rows, 0);
  copy(ml.ring_src, plan.ring_src, rows, -1);
  copy(ml.ring_dst, plan.ring_dst, rows, -1);
  copy(ml.csa_entries, plan.csa_entries, rows, 0);
  copy(ml.hca_entries, plan.hca_entries, rows, 0);
  // Padding chunks are empty (offsets repeat the end) and skipped (slot -1).
  copy(ml.chunk_offsets, plan.chunk_offsets, padded_chunks + 1, static_cast<int32_t>(n));
  copy(ml.chunk_positions, plan.chunk_positions, padded_chunks, -1);
  copy(ml.chunk_slots, plan.chunk_slots, padded_chunks, -1);
  copy(ml.logit_rows, plan.logit_rows, std::max<int64_t>(rows, 1), 0);
  copy(ml.snapshot_table, plan.snapshot_table, padded_chunks * plan.max_snapshots, -1);
  copy(ml.compress_slots, plan.compress_slots, padded_chunks, -1);
  if (trees) {
    // Padding rows are no nodes and read no staged entries.
    copy(ml.tree_rows, plan.tree_rows, rows, -1);
    copy(ml.tree_paths, plan.tree_paths, rows * plan.path_capacity, -1);
    copy(ml.csa_staged_first, plan.csa_staged_first, rows, 0);
    copy(ml.csa_staged, plan.csa_staged, rows * std::max<int64_t>(plan.csa_staged_capacity, 1), -1);
    copy(ml.hca_staged_first, plan.hca_staged_first, rows, 0);
    copy(ml.hca_staged, plan.hca_staged, rows * std::max<int64_t>(plan.hca_staged_capacity, 1), -1);
  }
  if (m.fast_attention) {
    const std::vector<int64_t>* kinds[3] = {&plan.sliding_rows, &plan.csa_rows, &plan.hca_rows};
    std::vector<int64_t> padded;
    for (int kind = 0; kind < 3; ++kind) {
      padded.assign(kinds[kind]->begin(), kinds[kind]->end());
      padded.resize(static_cast<size_t>(rows), 0);
      PG_RETURN_IF_ERROR(pc::PlanSparseAttention(
          padded, m.attention_layout,
          std::span<int32_t>(meta.host(ml.schedules[static_cast<size_t>(kind)]), static_cast<size_t>(schedule_ints)),
          m.limits.batch_invariant));
    }
  }
  DeviceStep step;
  step.rows = rows;
  step.num_chunks = n_chunks;
  step.logit_rows = r;
  step.token_ids_offset = ml.token_ids;
  step.max_chunk_tokens = plan.max_chunk_tokens;
  return step;
}

Status CudaModel::Enqueue(const DeviceStep& step, const StepMeta& meta, cudaStream_t stream, OpProfiler* profiler) {
  Impl& m = *impl_;
  m.meta = &meta;
  m.stream = stream;
  m.profiler = profiler;
  if (m.parallel.comm != nullptr) m.parallel.comm->UseStream(stream);
  const Status s = m.EnqueueStep(step.rows, step.num_chunks, step.logit_rows);
  m.profiler = nullptr;
  return s;
}

namespace {

// Copies `height` rows of `width` bytes between pitched device regions.
cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   cudaStream_t stream) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream);
}

}  // namespace

namespace {

// Row `index` of a tensor whose first dimension has `rows` rows.
DeviceRegion RowOf(const Tensor& t, int64_t rows, int64_t index) {
  if (t.data == nullptr || rows <= 0) return {};
  const size_t row_bytes = DTypeBytes(t.dtype, static_cast<size_t>(t.numel() / rows));
  return {static_cast<char*>(t.data) + static_cast<size_t>(index) * row_bytes, row_bytes};
}

}  // namespace

std::vector<DeviceRegion> CudaModel::SlotRegions(int32_t slot) const {
  const Impl& m = *impl_;
  const KvGeometry& g = m.geometry;
  std::vector<DeviceRegion> r;
  if (slot < 0 || slot >= m.pools.num_slots) return r;
  const size_t window_bytes = static_cast<size_t>(g.window * g.head_dim * 2);
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const LayerKv& k = m.kv[i];
    r.push_back({static_cast<char*>(k.window.data) + static_cast<size_t>(slot) * window_bytes, window_bytes});
    if (g.layers[i].ratio <= 0) continue;
    r.push_back(RowOf(k.kv_ring, m.pools.num_slots, slot));
    r.push_back(RowOf(k.gate_ring, m.pools.num_slots, slot));
    if (g.layers[i].csa_index < 0) continue;
    r.push_back(RowOf(k.index_kv_ring, m.pools.num_slots, slot));
    r.push_back(RowOf(k.index_gate_ring, m.pools.num_slots, slot));
  }
  return r;
}

std::vector<DeviceRegion> CudaModel::BlockRegions(int32_t block) const {
  const Impl& m = *impl_;
  const KvGeometry& g = m.geometry;
  std::vector<DeviceRegion> r;
  if (block < 0 || block >= m.pools.num_blocks) return r;
  for (size_t i = 0; i < g.layers.size(); ++i) {
    if (g.layers[i].ratio <= 0) continue;
    r.push_back(RowOf(m.kv[i].cache, m.pools.num_blocks, block));
    if (g.layers[i].csa_index >= 0) r.push_back(RowOf(m.kv[i].index_keys, m.pools.num_blocks, block));
  }
  return r;
}

Status CudaModel::EnqueueRestores(std::span<const ChunkView> chunks, cudaStream_t stream) {
  const Impl& m = *impl_;
  const KvGeometry& g = m.geometry;
  const int64_t layers = static_cast<int64_t>(g.layers.size());
  const size_t window_bytes = static_cast<size_t>(g.window * g.head_dim * 2);
  const size_t layer_pitch = static_cast<size_t>(m.window_layer_rows * g.head_dim * 2);
  for (const ChunkView& chunk : chunks) {
    if (chunk.restore < 0) continue;
    if (chunk.restore >= m.pools.num_snapshots) return InvalidArgument("restore from a snapshot outside the pools");
    const char* record = static_cast<const char*>(m.pools.snapshots) + static_cast<int64_t>(chunk.restore) * m.snapshot_floats * 4;
    char* window = static_cast<char*>(m.kv[0].window.data) + static_cast<int64_t>(chunk.slot) * window_bytes;
    PG_CUDA_RETURN_IF_ERROR(Copy2D(window, layer_pitch, record, window_bytes, window_bytes, static_cast<size_t>(layers), stream));
    if (g.num_csa == 0) continue;
    // CSA rings: the block that ends at the boundary, into its half of each ring.
    for (size_t i = 0; i < g.layers.size(); ++i) {
      const KvGeometry::Layer& l = g.layers[i];
      if (l.csa_index != 0) continue;  // the first CSA layer's views give every array's base
      const int64_t half = ((chunk.first_position / l.ratio - 1) & 1) * l.ratio;
      const LayerKv& k = m.kv[i];
      struct Array {
        const Tensor* ring;
        const float* tail;
        int64_t width;
      };
      const Array arrays[] = {{&k.kv_ring, k.tail_kv, 2 * g.head_dim},
                              {&k.gate_ring, k.tail_gate, 2 * g.head_dim},
                              {&k.index_kv_ring, k.tail_index_kv, 2 * g.index_dim},
                              {&k.index_gate_ring, k.tail_index_gate, 2 * g.index_dim}};
      for (const Array& a : arrays) {
        const int64_t ring_floats = 2 * l.ratio * a.width;
        const size_t bytes = static_cast<size_t>(l.ratio * a.width * 4);
        float* dst = static_cast<float*>(a.ring->data) + chunk.slot * ring_floats + half * a.width;
        const float* src = a.tail + static_cast<int64_t>(chunk.restore) * m.snapshot_floats;
        PG_CUDA_RETURN_IF_ERROR(Copy2D(dst, static_cast<size_t>(m.pools.num_slots * ring_floats * 4), src, bytes, bytes,
                                       static_cast<size_t>(g.num_csa), stream));
      }
    }
  }
  return Status::Ok();
}

Status CudaModel::EnqueueSnapshots(std::span<const ChunkView> chunks, const DeviceStep& step, cudaStream_t stream) {
  (void)step;
  const Impl& m = *impl_;
  const KvGeometry& g = m.geometry;
  const int64_t b = g.block_tokens, w = g.window;
  const size_t window_bytes = static_cast<size_t>(w * g.head_dim * 2);
  const size_t row_bytes = static_cast<size_t>(g.head_dim * 2);
  const size_t layer_pitch = static_cast<size_t>(m.window_layer_rows) * row_bytes;
  const char* window = static_cast<const char*>(m.kv[0].window.data);
  int64_t row0 = 0;  // the chunk's first row in the step
  for (const ChunkView& chunk : chunks) {
    const int64_t p0 = chunk.first_position, end = p0 + chunk.num_tokens;
    for (size_t i = 0; i < chunk.snapshots.size(); ++i) {
      const int32_t s = chunk.snapshots[i];
      if (s < 0) continue;
      const int64_t boundary = (p0 / b + 1 + static_cast<int64_t>(i)) * b;
      // At the chunk's end the ring holds positions [L - W, L) in ring order; inside the
      // chunk they are the step's rows (PlanStep keeps such boundaries W past the start).
      const char* src = boundary == end
                            ? window + static_cast<int64_t>(chunk.slot) * static_cast<int64_t>(window_bytes)
                            : window + (m.pools.num_slots * w + row0 + boundary - w - p0) * static_cast<int64_t>(row_bytes);
      char* dst = static_cast<char*>(m.pools.snapshots) + static_cast<int64_t>(s) * m.snapshot_floats * 4;
      PG_CUDA_RETURN_IF_ERROR(
          Copy2D(dst, window_bytes, src, layer_pitch, window_bytes, g.layers.size(), stream));
    }
    row0 += chunk.num_tokens;
  }
  return Status::Ok();
}

Tensor CudaModel::logits(int64_t rows) const {
  return View(impl_->ws.logits, DType::kF32, {rows, impl_->config.vocab_size});
}

std::vector<std::string> CudaModel::op_kinds() const {
  std::vector<std::string> names;
  for (int k = 0; k < static_cast<int>(OpKind::kCount); ++k) names.emplace_back(OpKindName(static_cast<OpKind>(k)));
  return names;
}

Result<WeightLoadOptions> WeightOptions(const DeviceWeightOptions& o) {
  WeightLoadOptions w;
  w.synthetic_matrices = o.synthetic;
  w.seed = o.seed;
  w.on_progress = o.on_progress;
  if (o.expert_format == "mxfp4") {
    w.expert_format = ExpertFormat::kMXFP4;
  } else if (o.expert_format != "bf16") {
    return InvalidArgument("unknown expert format '" + o.expert_format + "' (bf16 or mxfp4)");
  }
  if (o.dense_format == "fp8") {
    w.dense_format = DenseFormat::kFP8;
  } else if (o.dense_format != "bf16") {
    return InvalidArgument("unknown dense format '" + o.dense_format + "' (bf16 or fp8)");
  }
  return w;
}

void RegisterDeviceModel(DeviceModelRegistry& registry) {
  registry.Register("deepseek_v4",
                    [](const ModelConfig& config, const Checkpoint& checkpoint, const DeviceModelLimits& limits,
                       const DeviceWeightOptions& weights, pc::CachingAllocator& allocator,
                       cudaStream_t stream) -> Result<std::unique_ptr<DeviceModel>> {
                      PG_ASSIGN_OR_RETURN(WeightLoadOptions w, WeightOptions(weights));
                      PG_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> model,
                                          CudaModel::Create(config, checkpoint, limits, w, allocator, stream,
                                                            weights.parallel));
                      return std::unique_ptr<DeviceModel>(std::move(model));
                    });
}

}  // namespace peregrine::deepseek_v4::cuda
