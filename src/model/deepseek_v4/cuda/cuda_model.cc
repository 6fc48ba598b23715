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
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/step_feed.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "kernels/indexer_scores.cuh"
#include "kernels/indexer_topk.cuh"
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

CudaModel::Impl::~Impl() {
  graphs.clear();
  for (cudaEvent_t e : event_pool) (void)cudaEventDestroy(e);
  for (int32_t* h : meta_host)
    if (h != nullptr) (void)cudaFreeHost(h);
  for (cudaEvent_t e : meta_copied)
    if (e != nullptr) (void)cudaEventDestroy(e);
}

Status CudaModel::Impl::Allocate() {
  const ModelConfig& c = config;
  const CudaModelOptions& o = options;
  const int64_t n = o.max_tokens;
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  const int64_t w = c.sliding_window;
  const int64_t hd = c.head_dim;
  auto alloc = [&](DType dtype, Shape shape, DeviceTensor* out) -> Status {
    const size_t bytes = DTypeBytes(dtype, static_cast<size_t>(shape.numel()));
    PG_ASSIGN_OR_RETURN(out->buffer, allocator->Allocate(std::max<size_t>(bytes, 16)));
    out->view = Tensor::Contiguous(out->buffer.data(), dtype, shape, Device::kCuda);
    return Status::Ok();
  };
  auto alloc_state = [&](DType dtype, Shape shape, DeviceTensor* out) -> Status {
    PG_RETURN_IF_ERROR(alloc(dtype, shape, out));
    state_bytes += DTypeBytes(dtype, static_cast<size_t>(shape.numel()));
    // Compressor rings and caches start zeroed: a fresh slot reads no garbage.
    PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out->view.data, 0, out->buffer.bytes(), stream.get()));
    return Status::Ok();
  };

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

  // Per-layer state.
  max_entries_csa = c.compress_ratio_csa > 0 ? o.max_context / c.compress_ratio_csa + 1 : 1;
  max_entries_hca = c.compress_ratio_hca > 0 ? o.max_context / c.compress_ratio_hca + 1 : 1;
  state.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerState& s = state[static_cast<size_t>(i)];
    const DeviceLayer& lw = weights.layers[static_cast<size_t>(i)];
    PG_RETURN_IF_ERROR(alloc_state(DType::kBF16, {o.num_slots * w + n, hd}, &s.window));
    if (lw.compressor) {
      const DeviceCompressor& cw = *lw.compressor;
      const int64_t entries = cw.ratio == c.compress_ratio_csa ? max_entries_csa : max_entries_hca;
      PG_RETURN_IF_ERROR(alloc_state(DType::kF32, {o.num_slots, cw.coff * cw.ratio, cw.coff * cw.dim}, &s.kv_state));
      PG_RETURN_IF_ERROR(alloc_state(DType::kF32, {o.num_slots, cw.coff * cw.ratio, cw.coff * cw.dim}, &s.gate_state));
      PG_RETURN_IF_ERROR(alloc_state(DType::kBF16, {o.num_slots, entries, hd}, &s.cache));
    }
    if (lw.index_compressor) {
      const DeviceCompressor& cw = *lw.index_compressor;
      PG_RETURN_IF_ERROR(
          alloc_state(DType::kF32, {o.num_slots, cw.coff * cw.ratio, cw.coff * cw.dim}, &s.index_kv_state));
      PG_RETURN_IF_ERROR(
          alloc_state(DType::kF32, {o.num_slots, cw.coff * cw.ratio, cw.coff * cw.dim}, &s.index_gate_state));
      PG_RETURN_IF_ERROR(alloc_state(DType::kBF16, {o.num_slots, max_entries_csa, c.index_head_dim}, &s.index_keys));
    }
  }

  // Workspace.
  Workspace& x = ws;
  const int64_t h = c.num_heads;
  const int64_t ih = c.index_n_heads;
  const int64_t id = c.index_head_dim;
  const int64_t e = c.num_experts;
  const int64_t k = c.num_experts_per_tok;
  const int64_t inter = c.moe_intermediate_size;
  const int64_t shared = inter * c.num_shared_experts;
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc, d}, &x.streams));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, d}, &x.x));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc}, &x.post));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hc, hc}, &x.comb));
  PG_RETURN_IF_ERROR(alloc(DType::kF32,
                           {std::max(pc::HyperConnectionWorkspaceFloats(n, hc, d, (2 + hc) * hc),
                                     pc::HyperConnectionWorkspaceFloats(n, hc, d, hc))},
                           &x.hc_workspace));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, d}, &x.f));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, c.q_lora_rank}, &x.qr));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, c.q_lora_rank}, &x.qr_n));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, h * hd}, &x.q));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, h, hd}, &x.q_n));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, hd}, &x.kv));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, 2 * hd}, &x.ckv));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, 2 * hd}, &x.cgate));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, 2 * id}, &x.ikv));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, 2 * id}, &x.igate));
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
    PG_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(x.topk_workspace.view.data, 0, x.topk_workspace.buffer.bytes(), stream.get()));
  }
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, h, hd}, &x.o));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, c.o_groups, c.o_lora_rank}, &x.mid));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, e}, &x.router_logits));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {n, k}, &x.topk_ids));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n, k}, &x.topk_weights));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {e + 1}, &x.expert_offsets));
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {n * k}, &x.sorted_assignments));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n * k, inter}, &x.expert_h));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {n * k, d}, &x.expert_y));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, 2 * shared}, &x.shared_gate_up));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, shared}, &x.shared_h));
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {n, d}, &x.shared_y));
  max_logit_rows = o.max_logit_rows > 0 ? o.max_logit_rows : o.num_slots;
  PG_RETURN_IF_ERROR(alloc(DType::kBF16, {max_logit_rows, d}, &x.head_x));
  PG_RETURN_IF_ERROR(alloc(DType::kF32, {max_logit_rows, c.vocab_size}, &x.logits));

  fast_attention = BuiltAttention(h, hd);
  fast_indexer = BuiltIndexer(ih, id);
  if (fast_attention) {
    PG_RETURN_IF_ERROR(pc::PrepareSparseAttention());
    attention_layout = pc::SparseAttentionLayout(num_sms, static_cast<int>(n));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {attention_layout.max_segments, h, hd}, &x.partial_o));
    PG_RETURN_IF_ERROR(alloc(DType::kF32, {attention_layout.max_segments, h}, &x.partial_lse));
  }

  // Metadata: per token 9 ints + the window list + a feed pair, per chunk 4, the logit rows,
  // 3 schedules.
  const int64_t schedule_ints = fast_attention ? attention_layout.num_ints() : 0;
  meta_capacity = n * (w + 12) + 4 * (n + 1) + 3 * schedule_ints + 64;
  PG_RETURN_IF_ERROR(alloc(DType::kI32, {meta_capacity}, &meta));
  for (size_t i = 0; i < meta_host.size(); ++i) {
    PG_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(reinterpret_cast<void**>(&meta_host[i]), static_cast<size_t>(meta_capacity) * 4));
    PG_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&meta_copied[i], cudaEventDisableTiming));
  }
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  return Status::Ok();
}

Tensor CudaModel::Impl::MetaView(int64_t offset, Shape shape) const {
  return Tensor::Contiguous(meta.view.as<int32_t>() + offset, DType::kI32, shape, Device::kCuda);
}

Status CudaModel::Impl::UploadPlan(const StepPlan& plan, int64_t rows, std::span<const StepChunk> step_chunks,
                                   const int32_t* fed_tokens, int64_t num_fed_tokens) {
  const int64_t w = config.sliding_window;
  const int64_t chunks = plan.num_chunks;
  int64_t at = 0;
  auto place = [&](int64_t count) {
    const int64_t offset = at;
    at += (count + 3) / 4 * 4;  // 16-byte aligned sections
    return offset;
  };
  MetaLayout& m = layout;
  m.token_ids = place(rows);
  m.positions = place(rows);
  m.token_slots = place(rows);
  m.window_indices = place(rows * w);
  m.window_lengths = place(rows);
  m.ring_src = place(rows);
  m.ring_dst = place(rows);
  m.csa_entries = place(rows);
  m.hca_entries = place(rows);
  m.chunk_offsets = place(std::max(rows, chunks) + 1);
  m.chunk_positions = place(std::max(rows, chunks));
  m.chunk_slots = place(std::max(rows, chunks));
  m.logit_rows = place(std::max<int64_t>(rows, 1));
  const int64_t schedule_ints = fast_attention ? attention_layout.num_ints() : 0;
  for (int64_t& s : m.schedules) s = place(schedule_ints);
  // Last: every section a captured graph reads sits at an offset that depends on `rows`
  // only; the feed pairs (read before the graph) vary per step.
  m.num_feeds = 0;
  for (const StepChunk& chunk : step_chunks) m.num_feeds += chunk.fed_from >= 0 ? 1 : 0;
  m.feeds = place(2 * m.num_feeds);
  m.total = at;
  if (m.total > meta_capacity) return Internal("step metadata exceeds its buffer");

  // The staging buffer of two uploads ago: its copy has been enqueued, wait until it ran.
  const int turn = meta_turn;
  meta_turn ^= 1;
  PG_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(meta_copied[static_cast<size_t>(turn)]));
  int32_t* h = meta_host[static_cast<size_t>(turn)];
  const int64_t n = plan.num_tokens;
  // Real rows first, then padding rows that every kernel skips (no window rows, no
  // entries, negative positions, no ring update).
  auto copy = [&](int64_t offset, const std::vector<int32_t>& v, int64_t count, int32_t pad) {
    std::copy(v.begin(), v.end(), h + offset);
    std::fill(h + offset + static_cast<int64_t>(v.size()), h + offset + count, pad);
  };
  copy(m.token_ids, plan.token_ids, rows, 0);
  copy(m.positions, plan.positions, rows, -1);
  copy(m.token_slots, plan.token_slots, rows, 0);
  copy(m.window_indices, plan.window_indices, rows * w, -1);
  copy(m.window_lengths, plan.window_lengths, rows, 0);
  copy(m.ring_src, plan.ring_src, rows, -1);
  copy(m.ring_dst, plan.ring_dst, rows, -1);
  copy(m.csa_entries, plan.csa_entries, rows, 0);
  copy(m.hca_entries, plan.hca_entries, rows, 0);
  // Padding chunks are empty (offsets repeat the end) and skipped (slot -1).
  const int64_t padded_chunks = std::max(rows, chunks);
  copy(m.chunk_offsets, plan.chunk_offsets, padded_chunks + 1, static_cast<int32_t>(n));
  copy(m.chunk_positions, plan.chunk_positions, padded_chunks, -1);
  copy(m.chunk_slots, plan.chunk_slots, padded_chunks, -1);
  copy(m.logit_rows, plan.logit_rows, rows, 0);
  if (m.num_feeds > 0) {
    if (fed_tokens == nullptr) return InvalidArgument("a chunk is fed from the previous step, but no tokens were given");
    int32_t* feed = h + m.feeds;
    int64_t row = 0;
    for (const StepChunk& chunk : step_chunks) {
      row += static_cast<int64_t>(chunk.tokens.size());
      if (chunk.fed_from < 0) continue;
      if (chunk.fed_from >= num_fed_tokens) return InvalidArgument("a chunk is fed from outside the previous step's tokens");
      *feed++ = static_cast<int32_t>(row - 1);
      *feed++ = chunk.fed_from;
      h[m.token_ids + row - 1] = 0;  // the placeholder, until the feed overwrites it
    }
  }
  if (fast_attention) {
    const std::vector<int64_t>* kinds[3] = {&plan.sliding_rows, &plan.csa_rows, &plan.hca_rows};
    std::vector<int64_t> padded;
    for (int kind = 0; kind < 3; ++kind) {
      padded.assign(kinds[kind]->begin(), kinds[kind]->end());
      padded.resize(static_cast<size_t>(rows), 0);
      PG_RETURN_IF_ERROR(pc::PlanSparseAttention(
          padded, attention_layout, std::span<int32_t>(h + m.schedules[static_cast<size_t>(kind)], schedule_ints)));
    }
  }
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta.view.data, h, static_cast<size_t>(m.total) * 4, cudaMemcpyHostToDevice,
                                          stream.get()));
  PG_CUDA_RETURN_IF_ERROR(cudaEventRecord(meta_copied[static_cast<size_t>(turn)], stream.get()));
  if (m.num_feeds == 0) return Status::Ok();
  pc::FeedTokensArgs feed;
  feed.token_ids = MetaView(m.token_ids, {rows});
  feed.feeds = MetaView(m.feeds, {m.num_feeds, 2});
  feed.sampled = Tensor::Contiguous(const_cast<int32_t*>(fed_tokens), DType::kI32, {num_fed_tokens}, Device::kCuda);
  return pc::FeedTokens(feed, stream.get());
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
    return pc::EmbeddingLookup(a, stream.get());
  }));
  for (int64_t i = 0; i < c.num_layers; ++i) PG_RETURN_IF_ERROR(EnqueueLayer(i, rows, chunks));
  if (logit_rows == 0) return Status::Ok();

  PG_RETURN_IF_ERROR(Op(OpKind::kHead, [&]() -> Status {
    pc::HcHeadArgs a;
    a.streams = View(ws.streams, DType::kF32, {rows, hc, d});
    a.rows = MetaView(layout.logit_rows, {logit_rows});
    a.fn = weights.hc_head.fn.view;
    a.base = weights.hc_head.base.view;
    a.scale = weights.hc_head.scale.view;
    a.norm_weight = weights.norm.view;
    a.workspace = ws.hc_workspace.view;
    a.y = View(ws.head_x, DType::kBF16, {logit_rows, d});
    a.hc_eps = static_cast<float>(c.hc_eps);
    a.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
    PG_RETURN_IF_ERROR(pc::HyperConnectionHead(a, stream.get()));
    return pc::Linear(blas,
                      {View(ws.head_x, DType::kBF16, {logit_rows, d}), weights.head.view,
                       View(ws.logits, DType::kF32, {logit_rows, c.vocab_size})},
                      stream.get());
  }));
  return Status::Ok();
}

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() {
  if (impl_) (void)impl_->stream.Synchronize();
}

const ModelConfig& CudaModel::config() const { return impl_->config; }
const CudaModelOptions& CudaModel::options() const { return impl_->options; }
uint64_t CudaModel::weight_bytes() const { return impl_->weights.bytes; }
uint64_t CudaModel::state_bytes() const { return impl_->state_bytes; }

Result<std::unique_ptr<CudaModel>> CudaModel::Create(ModelConfig config, const Checkpoint& checkpoint,
                                                     const CudaModelOptions& options) {
  PG_RETURN_IF_ERROR(ValidateModelConfig(config));
  if (options.num_slots < 1 || options.max_tokens < 1 || options.max_context < 2)
    return InvalidArgument("CUDA model: num_slots, max_tokens must be >= 1 and max_context >= 2");
  if (options.max_context > config.max_position_embeddings)
    return InvalidArgument("CUDA model: max_context exceeds the model's max_position_embeddings");
  const std::vector<pc::DeviceInfo> devices = pc::ListDevices();
  if (options.device < 0 || options.device >= static_cast<int>(devices.size()))
    return Unavailable("no CUDA device " + std::to_string(options.device) + " (found " +
                              std::to_string(devices.size()) + ")");
  PG_RETURN_IF_ERROR(pc::SelectDevice(options.device));
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  impl->options = options;
  impl->num_sms = devices[static_cast<size_t>(options.device)].num_sms;
  impl->allocator = std::make_unique<pc::CachingAllocator>(impl->raw);
  PG_ASSIGN_OR_RETURN(impl->stream, pc::Stream::Create());
  PG_ASSIGN_OR_RETURN(impl->blas, pc::Blas::Create(*impl->allocator));
  PG_ASSIGN_OR_RETURN(impl->weights, LoadDeviceWeights(impl->config, checkpoint, options.weights, *impl->allocator,
                                                       impl->stream.get()));
  PG_RETURN_IF_ERROR(impl->Allocate());
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

namespace {

// Token ids known on the host (a fed chunk's last token is a placeholder).
Status CheckTokens(const ModelConfig& c, std::span<const StepChunk> chunks) {
  for (const StepChunk& chunk : chunks) {
    const size_t known = chunk.tokens.size() - (chunk.fed_from >= 0 ? 1 : 0);
    for (int32_t id : chunk.tokens.first(known))
      if (id < 0 || id >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(id));
  }
  return Status::Ok();
}

// The graph bucket of a decode batch: the next power of two.
int64_t Bucket(int64_t batch) {
  int64_t b = 1;
  while (b < batch) b *= 2;
  return b;
}

}  // namespace

peregrine::cuda::CachingAllocator& CudaModel::allocator() { return *impl_->allocator; }

cudaStream_t CudaModel::stream() const { return impl_->stream.get(); }

double CudaModel::last_host_ms() const { return impl_->last_host_ms; }

Status CudaModel::Impl::Enqueue(std::span<const StepChunk> chunks, const int32_t* fed_tokens, int64_t num_fed_tokens,
                                int64_t* logit_rows) {
  const auto started = std::chrono::steady_clock::now();
  PG_RETURN_IF_ERROR(CheckTokens(config, chunks));
  const StepLimits limits{options.num_slots, options.max_tokens, options.max_context};
  PG_ASSIGN_OR_RETURN(StepPlan plan, PlanStep(chunks, config, limits));
  const int64_t r = static_cast<int64_t>(plan.logit_rows.size());
  if (r > max_logit_rows)
    return InvalidArgument("step wants " + std::to_string(r) + " logits rows; the model holds " +
                           std::to_string(max_logit_rows));
  const bool decode = plan.num_tokens == plan.num_chunks;
  const int64_t bucket = Bucket(plan.num_tokens);
  if (decode && plan.num_tokens <= graph_max_batch && bucket <= options.max_tokens && bucket <= max_logit_rows &&
      r == plan.num_tokens) {
    // One token per chunk, each wanting logits: replay the bucket's graph (captured on first use).
    PG_RETURN_IF_ERROR(UploadPlan(plan, bucket, chunks, fed_tokens, num_fed_tokens));
    auto it = graphs.find(bucket);
    if (it == graphs.end()) {
      PG_RETURN_IF_ERROR(pc::Graph::BeginCapture(stream.get()));
      const Status enqueued = EnqueueStep(bucket, bucket, bucket);
      PG_ASSIGN_OR_RETURN(pc::Graph graph, pc::Graph::EndCapture(stream.get()));
      PG_RETURN_IF_ERROR(enqueued);
      it = graphs.emplace(bucket, std::move(graph)).first;
    }
    PG_RETURN_IF_ERROR(it->second.Launch(stream.get()));
  } else {
    PG_RETURN_IF_ERROR(UploadPlan(plan, plan.num_tokens, chunks, fed_tokens, num_fed_tokens));
    PG_RETURN_IF_ERROR(EnqueueStep(plan.num_tokens, plan.num_chunks, r));
  }
  *logit_rows = r;
  last_host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return Status::Ok();
}

Status CudaModel::Forward(std::span<const StepChunk> chunks, std::vector<float>* logits, const LogitsHook& hook) {
  Impl& m = *impl_;
  int64_t r = 0;
  PG_RETURN_IF_ERROR(m.Enqueue(chunks, nullptr, 0, &r));
  if (hook) {
    PG_RETURN_IF_ERROR(hook(View(m.ws.logits, DType::kF32, {r, m.config.vocab_size}), m.stream.get()));
    return m.stream.Synchronize();
  }
  logits->resize(static_cast<size_t>(r * m.config.vocab_size));
  if (r > 0) {
    // Logit rows come out in the plan's order (graph buckets compute every row's head:
    // rows are the logit_rows list, padded, so the first r are the wanted ones).
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits->data(), m.ws.logits.view.data,
                                            logits->size() * sizeof(float), cudaMemcpyDeviceToHost, m.stream.get()));
  }
  return m.stream.Synchronize();
}

Status CudaModel::Launch(std::span<const StepChunk> chunks, const LogitsHook& hook, const int32_t* fed_tokens,
                         int64_t num_fed_tokens) {
  Impl& m = *impl_;
  int64_t r = 0;
  PG_RETURN_IF_ERROR(m.Enqueue(chunks, fed_tokens, num_fed_tokens, &r));
  return hook(View(m.ws.logits, DType::kF32, {r, m.config.vocab_size}), m.stream.get());
}

Status CudaModel::EnableGraphs(int64_t max_batch) {
  if (max_batch < 0 || max_batch > impl_->options.max_tokens || max_batch > impl_->options.num_slots)
    return InvalidArgument("graph batch limit must be in [0, min(max_tokens, num_slots)]");
  impl_->graph_max_batch = max_batch;
  impl_->graphs.clear();
  return Status::Ok();
}

Status CudaModel::ProfileForward(std::span<const StepChunk> chunks, std::vector<OpProfile>* profile,
                                 double* total_ms) {
  Impl& m = *impl_;
  PG_RETURN_IF_ERROR(CheckTokens(m.config, chunks));
  const StepLimits limits{m.options.num_slots, m.options.max_tokens, m.options.max_context};
  PG_ASSIGN_OR_RETURN(StepPlan plan, PlanStep(chunks, m.config, limits));
  PG_RETURN_IF_ERROR(m.UploadPlan(plan, plan.num_tokens));
  PG_ASSIGN_OR_RETURN(pc::Event start, pc::Event::Create(true));
  PG_ASSIGN_OR_RETURN(pc::Event stop, pc::Event::Create(true));
  m.profiling = true;
  m.events_used = 0;
  m.profile_events.clear();
  PG_RETURN_IF_ERROR(start.Record(m.stream.get()));
  const Status s = m.EnqueueStep(plan.num_tokens, plan.num_chunks, static_cast<int64_t>(plan.logit_rows.size()));
  m.profiling = false;
  PG_RETURN_IF_ERROR(s);
  PG_RETURN_IF_ERROR(stop.Record(m.stream.get()));
  PG_RETURN_IF_ERROR(m.stream.Synchronize());
  PG_ASSIGN_OR_RETURN(float total, pc::Event::ElapsedMs(start, stop));
  *total_ms = total;
  profile->assign(static_cast<size_t>(OpKind::kCount), {});
  for (size_t k = 0; k < profile->size(); ++k) (*profile)[k].name = OpKindName(static_cast<OpKind>(k));
  for (const Impl::ProfileEvent& e : m.profile_events) {
    float ms = 0.0f;
    PG_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e.begin, e.end));
    OpProfile& p = (*profile)[static_cast<size_t>(e.kind)];
    p.ms += ms;
    ++p.launches;
  }
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4::cuda
