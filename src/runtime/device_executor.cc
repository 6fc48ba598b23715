#include "runtime/device_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device.h"
#include "backend/cuda/ops/step_feed.h"

namespace peregrine {

namespace {

namespace pc = ::peregrine::cuda;

// Device memory kept out of the KV pools: CUDA graphs, cuBLAS workspaces, the runner's
// sampling buffers and the allocator's rounding.
constexpr uint64_t kReserveBytes = uint64_t{1} << 30;

// The graph bucket of a decode batch: the next power of two.
int64_t Bucket(int64_t batch) {
  int64_t b = 1;
  while (b < batch) b *= 2;
  return b;
}

Result<uint64_t> FreeDeviceMemory(uint64_t* total) {
  size_t free_bytes = 0, total_bytes = 0;
  PG_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (total != nullptr) *total = total_bytes;
  return static_cast<uint64_t>(free_bytes);
}

std::string Gigabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

class DeviceExecutor::Profiler final : public OpProfiler {
 public:
  Profiler(cudaStream_t stream, size_t kinds) : stream_(stream), ms_(kinds, 0.0), launches_(kinds, 0) {}
  ~Profiler() override {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  Status Run(int kind, const std::function<Status()>& op) override {
    cudaEvent_t begin, end;
    PG_CUDA_RETURN_IF_ERROR(cudaEventCreate(&begin));
    events_.push_back(begin);
    PG_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end));
    events_.push_back(end);
    PG_CUDA_RETURN_IF_ERROR(cudaEventRecord(begin, stream_));
    const Status s = op();
    PG_CUDA_RETURN_IF_ERROR(cudaEventRecord(end, stream_));
    marks_.push_back({kind, begin, end});
    return s;
  }
  // After the stream synchronised.
  Status Collect(const std::vector<std::string>& names, std::vector<OpProfile>* out) {
    for (const Mark& m : marks_) {
      float ms = 0.0f;
      PG_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, m.begin, m.end));
      if (m.kind < 0 || static_cast<size_t>(m.kind) >= ms_.size()) return Internal("profiled op of an unknown kind");
      ms_[static_cast<size_t>(m.kind)] += ms;
      ++launches_[static_cast<size_t>(m.kind)];
    }
    out->clear();
    for (size_t k = 0; k < ms_.size(); ++k) out->push_back({k < names.size() ? names[k] : "?", ms_[k], launches_[k]});
    return Status::Ok();
  }

 private:
  struct Mark {
    int kind;
    cudaEvent_t begin, end;
  };
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<Mark> marks_;
  std::vector<double> ms_;
  std::vector<int64_t> launches_;
};

Result<std::unique_ptr<DeviceExecutor>> DeviceExecutor::Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                               const DeviceModelFactory& factory,
                                                               const ExecutorOptions& options) {
  if (options.num_slots < 1 || options.max_tokens < 1 || options.max_context < 2)
    return InvalidArgument("CUDA runtime: num_slots and max_tokens must be >= 1 and max_context >= 2");
  if (options.num_slots > INT32_MAX / 4) return InvalidArgument("CUDA runtime: too many slots");
  const DeviceParallel& parallel = options.weights.parallel;
  if (parallel.size > 1 && (parallel.comm == nullptr || parallel.comm->size() != parallel.size))
    return InvalidArgument("CUDA runtime: a sharded model needs its group's communicator");
  std::unique_ptr<DeviceExecutor> e(new DeviceExecutor());
  e->options_ = options;
  e->comm_ = parallel.size > 1 ? parallel.comm : nullptr;
  if (e->options_.max_logit_rows <= 0) e->options_.max_logit_rows = options.num_slots;
  PG_RETURN_IF_ERROR(e->Setup(config, checkpoint, factory));
  return e;
}

DeviceExecutor::~DeviceExecutor() {
  // The other ranks' Follow returns once they read this.
  if (sharded() && leader() && model_ != nullptr) (void)Publish(RankCommand::kStop, {}, 0);
  if (stream_.get() != nullptr) (void)stream_.Synchronize();
  graphs_.clear();
  model_.reset();
}

Status DeviceExecutor::Setup(const ModelConfig& config, const Checkpoint& checkpoint,
                             const DeviceModelFactory& factory) {
  const std::vector<pc::DeviceInfo> devices = pc::ListDevices();
  if (options_.device < 0 || options_.device >= static_cast<int>(devices.size()))
    return Unavailable("no CUDA device " + std::to_string(options_.device) + " (found " +
                       std::to_string(devices.size()) + ")");
  PG_RETURN_IF_ERROR(pc::SelectDevice(options_.device));
  num_sms_ = devices[static_cast<size_t>(options_.device)].num_sms;
  allocator_ = std::make_unique<pc::CachingAllocator>(raw_);
  PG_ASSIGN_OR_RETURN(stream_, pc::Stream::Create());
  DeviceModelLimits limits;
  limits.device = options_.device;
  limits.num_sms = num_sms_;
  limits.max_tokens = options_.max_tokens;
  limits.max_logit_rows = options_.max_logit_rows;
  limits.max_context = options_.max_context;
  limits.block_tokens = options_.block_tokens;
  limits.batch_invariant = options_.batch_invariant;
  limits.kv_cache_fp8 = options_.kv_cache_fp8;
  limits.max_verify_rows = options_.max_verify_rows;
  limits.max_draft_steps = options_.max_draft_steps;
  limits.draft_candidates = options_.draft_candidates;
  PG_ASSIGN_OR_RETURN(model_, factory(config, checkpoint, limits, options_.weights, *allocator_, stream_.get()));
  if (comm_ != nullptr) comm_->UseStream(stream_.get());
  PG_RETURN_IF_ERROR(AllocatePools());

  // Metadata: the model's sections for the largest step, then the runtime's: block-table
  // changes (a fresh sequence rewrites its whole row), fed tokens, sampled-token slots.
  const int64_t chunks = std::max(options_.num_slots, options_.max_tokens);
  meta_capacity_ = model_->meta_capacity(options_.max_tokens, chunks) + 3 * options_.num_slots * max_blocks_ +
                   4 * options_.num_slots + 4 * options_.max_logit_rows + 64;
  PG_ASSIGN_OR_RETURN(meta_, allocator_->Allocate(static_cast<size_t>(meta_capacity_) * 4));
  for (size_t i = 0; i < meta_host_.size(); ++i) {
    PG_ASSIGN_OR_RETURN(meta_host_[i], pc::PinnedHostBuffer::Allocate(static_cast<size_t>(meta_capacity_) * 4));
    PG_ASSIGN_OR_RETURN(meta_copied_[i], pc::Event::Create(false));
    PG_RETURN_IF_ERROR(meta_copied_[i].Record(stream_.get()));
  }
  return stream_.Synchronize();
}

Status DeviceExecutor::AllocatePools() {
  const KvLayout layout = model_->kv_layout();
  KvBudget budget;
  budget.num_slots = static_cast<int32_t>(options_.num_slots);
  budget.prefix_caching = options_.prefix_caching;
  budget.snapshot_fraction = options_.snapshot_fraction;
  PG_RETURN_IF_ERROR(stream_.Synchronize());
  uint64_t total = 0;
  PG_ASSIGN_OR_RETURN(const uint64_t free_before, FreeDeviceMemory(&total));
  max_blocks_ = std::max<int64_t>(layout.BlocksFor(options_.max_context), 1);
  uint64_t fixed = 0;  // pools' fixed parts, the block tables and the token buffer
  for (const KvKind& k : layout.paged) fixed += static_cast<uint64_t>(k.fixed_bytes);
  for (const KvKind& k : layout.per_request) fixed += static_cast<uint64_t>(k.fixed_bytes);
  fixed += static_cast<uint64_t>(options_.num_slots) * static_cast<uint64_t>(max_blocks_ + 1) * 4;
  if (options_.kv_tokens > 0) {
    capacity_ = SizeKvPoolsForTokens(layout, options_.kv_tokens, budget);
  } else {
    const auto allowed = static_cast<uint64_t>(options_.gpu_memory_utilization * static_cast<double>(total));
    const uint64_t used = total - free_before;
    if (allowed <= used + kReserveBytes + fixed)
      return ResourceExhausted("--gpu-memory-utilization " + std::to_string(options_.gpu_memory_utilization) +
                               " leaves no memory for the KV cache after " + Gigabytes(used) +
                               " of weights and workspaces");
    PG_ASSIGN_OR_RETURN(capacity_, SizeKvPools(layout, allowed - used - kReserveBytes - fixed, options_.max_context,
                                               budget));
  }
  if (sharded()) PG_RETURN_IF_ERROR(AgreeOnCapacity());
  if (capacity_.layout.BlocksFor(options_.max_context) > capacity_.num_blocks)
    return ResourceExhausted("the KV pools hold " +
                             std::to_string(static_cast<int64_t>(capacity_.num_blocks) * layout.block_tokens) +
                             " tokens, less than one sequence of --max-model-len " +
                             std::to_string(options_.max_context));

  // One allocation per kind, zeroed once (kernels never read a row before it is written,
  // but a profile of unwritten state then reads zeros, not NaNs).
  auto allocate = [&](uint64_t bytes) -> Status {
    PG_ASSIGN_OR_RETURN(pc::DeviceBuffer b, allocator_->Allocate(std::max<uint64_t>(bytes, 16)));
    PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.data(), 0, b.bytes(), stream_.get()));
    pools_.push_back(std::move(b));
    return Status::Ok();
  };
  DeviceKvPools pools;
  pools.num_slots = capacity_.num_slots;
  pools.num_blocks = capacity_.num_blocks;
  pools.num_snapshots = capacity_.num_snapshots;
  for (const KvKind& k : layout.paged) {
    PG_RETURN_IF_ERROR(allocate(static_cast<uint64_t>(k.bytes) * static_cast<uint64_t>(capacity_.num_blocks) +
                                static_cast<uint64_t>(k.fixed_bytes)));
    pools.paged.push_back(pools_.back().data());
  }
  for (const KvKind& k : layout.per_request) {
    PG_RETURN_IF_ERROR(allocate(static_cast<uint64_t>(k.bytes) * static_cast<uint64_t>(capacity_.num_slots) +
                                static_cast<uint64_t>(k.fixed_bytes)));
    pools.per_request.push_back(pools_.back().data());
  }
  if (capacity_.num_snapshots > 0) {
    PG_RETURN_IF_ERROR(allocate(static_cast<uint64_t>(layout.snapshot_bytes) *
                                static_cast<uint64_t>(capacity_.num_snapshots)));
    pools.snapshots = pools_.back().data();
  }
  PG_ASSIGN_OR_RETURN(block_tables_, allocator_->Allocate(static_cast<size_t>(options_.num_slots * max_blocks_) * 4));
  PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(block_tables_.data(), 0, block_tables_.bytes(), stream_.get()));
  tables_.assign(static_cast<size_t>(options_.num_slots * max_blocks_), 0);
  PG_ASSIGN_OR_RETURN(slot_tokens_, allocator_->Allocate(static_cast<size_t>(options_.num_slots) * 4));
  PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(slot_tokens_.data(), 0xff, slot_tokens_.bytes(), stream_.get()));
  pools.block_tables = block_tables_.as<int32_t>();
  pools.max_blocks = max_blocks_;
  PG_RETURN_IF_ERROR(stream_.Synchronize());
  PG_ASSIGN_OR_RETURN(const uint64_t free_after, FreeDeviceMemory(nullptr));
  kv_device_bytes_ = free_before > free_after ? free_before - free_after : 0;
  return model_->BindKv(pools);
}

Status DeviceExecutor::AgreeOnCapacity() {
  // Every rank's (blocks, snapshots), gathered on the device; each takes the smallest.
  PG_ASSIGN_OR_RETURN(pc::DeviceBuffer d, allocator_->Allocate(static_cast<size_t>(2 + 2 * comm_->size()) * 4));
  const int32_t mine[2] = {capacity_.num_blocks, capacity_.num_snapshots};
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.data(), mine, sizeof(mine), cudaMemcpyHostToDevice, stream_.get()));
  comm_->UseStream(stream_.get());
  PG_RETURN_IF_ERROR(comm_->AllGather(d.data(), d.as<int32_t>() + 2, 2, DType::kI32));
  std::vector<int32_t> all(static_cast<size_t>(2 * comm_->size()));
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(all.data(), d.as<int32_t>() + 2, all.size() * 4, cudaMemcpyDeviceToHost,
                                          stream_.get()));
  PG_RETURN_IF_ERROR(stream_.Synchronize());
  for (size_t r = 0; r < all.size(); r += 2) {
    capacity_.num_blocks = std::min(capacity_.num_blocks, all[r]);
    capacity_.num_snapshots = std::min(capacity_.num_snapshots, all[r + 1]);
  }
  return Status::Ok();
}

Status DeviceExecutor::Publish(RankCommand command, std::span<const int32_t> payload, int32_t argument) {
  const RankHeader header = MakeRankHeader(command, static_cast<int64_t>(payload.size()), argument);
  const size_t bytes = (static_cast<size_t>(kRankHeaderWords) + payload.size()) * 4;
  if (message_.bytes() < bytes) {
    PG_RETURN_IF_ERROR(stream_.Synchronize());  // the old buffer may still be read
    PG_ASSIGN_OR_RETURN(message_, allocator_->Allocate(std::max<size_t>(bytes, 4096)));
  }
  cudaStream_t s = stream_.get();
  // Pageable sources: each copy returns once its bytes are staged, so the vectors may go.
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(message_.data(), header.data(), sizeof(header), cudaMemcpyHostToDevice, s));
  if (!payload.empty())
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(message_.as<int32_t>() + kRankHeaderWords, payload.data(),
                                            payload.size() * 4, cudaMemcpyHostToDevice, s));
  comm_->UseStream(s);
  PG_RETURN_IF_ERROR(comm_->Broadcast(message_.data(), kRankHeaderWords, DType::kI32, 0));
  if (payload.empty()) return Status::Ok();
  return comm_->Broadcast(message_.as<int32_t>() + kRankHeaderWords, static_cast<int64_t>(payload.size()),
                          DType::kI32, 0);
}

Status DeviceExecutor::Receive(RankCommand* command, std::vector<int32_t>* payload, int32_t* argument) {
  cudaStream_t s = stream_.get();
  if (message_.bytes() < static_cast<size_t>(kRankHeaderWords) * 4) {
    PG_ASSIGN_OR_RETURN(message_, allocator_->Allocate(4096));
  }
  comm_->UseStream(s);
  PG_RETURN_IF_ERROR(comm_->Broadcast(message_.data(), kRankHeaderWords, DType::kI32, 0));
  RankHeader header{};
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(header.data(), message_.data(), sizeof(header), cudaMemcpyDeviceToHost, s));
  PG_RETURN_IF_ERROR(stream_.Synchronize());
  int64_t words = 0;
  PG_RETURN_IF_ERROR(ReadRankHeader(header, command, &words, argument));
  payload->resize(static_cast<size_t>(words));
  if (words == 0) return Status::Ok();
  const size_t bytes = static_cast<size_t>(kRankHeaderWords + words) * 4;
  if (message_.bytes() < bytes) {
    PG_ASSIGN_OR_RETURN(message_, allocator_->Allocate(bytes));
  }
  PG_RETURN_IF_ERROR(comm_->Broadcast(message_.as<int32_t>() + kRankHeaderWords, words, DType::kI32, 0));
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(payload->data(), message_.as<int32_t>() + kRankHeaderWords,
                                          static_cast<size_t>(words) * 4, cudaMemcpyDeviceToHost, s));
  return stream_.Synchronize();
}

Status DeviceExecutor::Follow() {
  if (!sharded() || leader()) return Internal("Follow is for the ranks other than the leader");
  std::vector<int32_t> payload;
  const LogitsHook none = [](const Tensor&, cudaStream_t) { return Status::Ok(); };
  for (;;) {
    RankCommand command{};
    int32_t argument = 0;
    PG_RETURN_IF_ERROR(Receive(&command, &payload, &argument));
    switch (command) {
      case RankCommand::kStop:
        return stream_.Synchronize();
      case RankCommand::kEnableGraphs:
        PG_RETURN_IF_ERROR(EnableGraphs(argument));
        break;
      case RankCommand::kLaunch: {
        PG_ASSIGN_OR_RETURN(DecodedChunks chunks, DecodedChunks::Decode(payload));
        PG_RETURN_IF_ERROR(Launch(chunks.chunks(), none));
        break;
      }
    }
  }
}

std::string DeviceExecutor::Describe() const {
  const KvPoolBytes b = PoolBytes(capacity_);
  std::string s = DescribeKvCapacity(capacity_, options_.max_context);
  s += "\nKV cache on the device: the pools take " + Gigabytes(b.total()) + " (" + Gigabytes(kv_device_bytes_) +
       " by the device's free-memory count, fixed parts and block tables included); weights " +
       Gigabytes(model_->weight_bytes());
  return s;
}

Status DeviceExecutor::EnableGraphs(int64_t max_batch) {
  if (max_batch < 0 || max_batch > options_.max_tokens || max_batch > options_.num_slots)
    return InvalidArgument("graph batch limit must be in [0, min(max_tokens, num_slots)]");
  if (sharded() && leader())
    PG_RETURN_IF_ERROR(Publish(RankCommand::kEnableGraphs, {}, static_cast<int32_t>(max_batch)));
  graph_max_batch_ = max_batch;
  graphs_.clear();
  draft_graphs_.clear();
  return Status::Ok();
}

Status DeviceExecutor::Prepare(std::span<const ChunkView> chunks, bool allow_graph, DeviceStep* step,
                               int64_t* bucket) {
  // The staging buffer of two launches ago: its copy has been enqueued, wait until it ran.
  const int turn = meta_turn_;
  meta_turn_ ^= 1;
  PG_RETURN_IF_ERROR(meta_copied_[static_cast<size_t>(turn)].Synchronize());
  StepMeta meta(meta_host_[static_cast<size_t>(turn)].as<int32_t>(), meta_.as<int32_t>(), meta_capacity_);

  // Graph steps: decode (one token per chunk) or speculative verify (draft chains of one
  // common length T per chunk), B chunks padded to the bucket's.
  bool decode = allow_graph && !chunks.empty() && static_cast<int64_t>(chunks.size()) <= graph_max_batch_;
  const int64_t per_chunk = chunks.empty() ? 1 : chunks.front().num_tokens;
  int64_t tokens = 0;
  for (const ChunkView& c : chunks) {
    tokens += c.num_tokens;
    decode = decode && c.num_tokens == per_chunk && c.needs_logits && !c.all_logits &&
             c.tree_parents.empty() == (per_chunk == 1);
  }
  const int64_t b = Bucket(static_cast<int64_t>(chunks.size()));
  *bucket = decode && b * per_chunk <= options_.max_tokens && b * per_chunk <= options_.max_logit_rows ? b : 0;
  PG_ASSIGN_OR_RETURN(*step, model_->Plan(chunks, *bucket > 0 ? *bucket * per_chunk : tokens, meta));

  // Block-table changes: each chunk's rows of the tables as its sequence now stands (a
  // sequence that starts in a slot rewrites the row from 0).
  const KvLayout& layout = capacity_.layout;
  std::vector<int32_t> delta_at, delta_value;
  for (const ChunkView& c : chunks) {
    const int64_t needed = layout.BlocksFor(c.first_position + c.span());
    if (needed > max_blocks_ || needed > static_cast<int64_t>(c.blocks.size()))
      return InvalidArgument("a chunk's block table does not cover it");
    int32_t* row = tables_.data() + static_cast<int64_t>(c.slot) * max_blocks_;
    for (int64_t j = 0; j < needed; ++j) {
      const int32_t v = c.blocks[static_cast<size_t>(j)];
      if (row[j] == v) continue;
      row[j] = v;
      delta_at.push_back(static_cast<int32_t>(c.slot * max_blocks_ + j));
      delta_value.push_back(v);
    }
  }
  const auto n_delta = static_cast<int64_t>(delta_at.size());
  const int64_t pairs = meta.Place(2 * n_delta), values = meta.Place(n_delta);
  // Fed tokens (row, slot) and the sampled chunks' slots (slot, sampling row).
  std::vector<int32_t> feeds, stores;
  int64_t row = 0, sample_row = 0;
  for (const ChunkView& c : chunks) {
    row += c.num_tokens;
    if (c.feeds_last) {
      feeds.push_back(static_cast<int32_t>(row - 1));
      feeds.push_back(c.slot);
    }
    if (c.needs_logits) {
      stores.push_back(c.slot);
      stores.push_back(static_cast<int32_t>(sample_row++));
    }
  }
  const int64_t feed_at = meta.Place(static_cast<int64_t>(feeds.size()));
  store_pairs_ = meta.Place(static_cast<int64_t>(stores.size()));
  num_store_pairs_ = static_cast<int64_t>(stores.size()) / 2;
  if (pairs < 0 || values < 0 || feed_at < 0 || store_pairs_ < 0) return Internal("step metadata exceeds its buffer");
  for (int64_t i = 0; i < n_delta; ++i) {
    meta.host(pairs)[2 * i] = delta_at[static_cast<size_t>(i)];
    meta.host(pairs)[2 * i + 1] = static_cast<int32_t>(i);
    meta.host(values)[i] = delta_value[static_cast<size_t>(i)];
  }
  std::copy(feeds.begin(), feeds.end(), meta.host(feed_at));
  std::copy(stores.begin(), stores.end(), meta.host(store_pairs_));

  cudaStream_t s = stream_.get();
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_.data(), meta.host(0), static_cast<size_t>(meta.size()) * 4,
                                          cudaMemcpyHostToDevice, s));
  PG_RETURN_IF_ERROR(meta_copied_[static_cast<size_t>(turn)].Record(s));
  if (n_delta > 0) {
    pc::FeedTokensArgs a;
    a.token_ids = Tensor::Contiguous(block_tables_.data(), DType::kI32, {options_.num_slots * max_blocks_}, Device::kCuda);
    a.feeds = meta.DeviceView(pairs, {n_delta, 2});
    a.sampled = meta.DeviceView(values, {n_delta});
    PG_RETURN_IF_ERROR(pc::FeedTokens(a, s));
  }
  if (!feeds.empty()) {
    pc::FeedTokensArgs a;
    a.token_ids = meta.DeviceView(step->token_ids_offset, {step->rows});
    a.feeds = meta.DeviceView(feed_at, {static_cast<int64_t>(feeds.size()) / 2, 2});
    a.sampled = Tensor::Contiguous(slot_tokens_.data(), DType::kI32, {options_.num_slots}, Device::kCuda);
    PG_RETURN_IF_ERROR(pc::FeedTokens(a, s));
  }
  return model_->EnqueueRestores(chunks, s);
}

Status DeviceExecutor::Launch(std::span<const ChunkView> chunks, const LogitsHook& hook) {
  const auto started = std::chrono::steady_clock::now();
  DeviceStep step;
  int64_t bucket = 0;
  PG_RETURN_IF_ERROR(Prepare(chunks, /*allow_graph=*/true, &step, &bucket));
  cudaStream_t s = stream_.get();
  if (sharded() && leader()) {
    // The chunks passed the checks: the other ranks run them too (before this rank's
    // forward, whose collectives wait for theirs).
    PG_ASSIGN_OR_RETURN(std::vector<int32_t> words, EncodeChunks(chunks));
    PG_RETURN_IF_ERROR(Publish(RankCommand::kLaunch, words, 0));
  }
  const StepMeta meta(meta_host_[static_cast<size_t>(meta_turn_ ^ 1)].as<int32_t>(), meta_.as<int32_t>(),
                      meta_capacity_);
  if (bucket > 0) {
    // Every row of a bucket computes logits (padding rows' are never read).
    const int64_t per_chunk = chunks.front().num_tokens;
    DeviceStep padded = step;
    padded.num_chunks = bucket;
    padded.logit_rows = bucket * per_chunk;
    const std::pair<int64_t, int64_t> key{bucket, per_chunk};
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      PG_RETURN_IF_ERROR(pc::Graph::BeginCapture(s));
      const Status enqueued = model_->Enqueue(padded, meta, s, nullptr);
      PG_ASSIGN_OR_RETURN(pc::Graph graph, pc::Graph::EndCapture(s));
      PG_RETURN_IF_ERROR(enqueued);
      it = graphs_.emplace(key, std::move(graph)).first;
    }
    PG_RETURN_IF_ERROR(it->second.Launch(s));
  } else {
    PG_RETURN_IF_ERROR(model_->Enqueue(step, meta, s, nullptr));
  }
  PG_RETURN_IF_ERROR(model_->EnqueueSnapshots(chunks, step, s));
  last_host_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  PG_RETURN_IF_ERROR(hook(model_->logits(step.logit_rows), s));
  if (!sharded()) return Status::Ok();
  // The leader's hook sampled into its token buffer; every rank's next fed chunks read it.
  comm_->UseStream(s);
  return comm_->Broadcast(slot_tokens_.data(), options_.num_slots, DType::kI32, 0);
}

Status DeviceExecutor::StoreSampledTokens(const int32_t* tokens, int64_t num_tokens) {
  if (num_store_pairs_ == 0) return Status::Ok();
  if (num_tokens != num_store_pairs_) return Internal("one sampled token per sampling row expected");
  pc::FeedTokensArgs a;
  a.token_ids = Tensor::Contiguous(slot_tokens_.data(), DType::kI32, {options_.num_slots}, Device::kCuda);
  a.feeds = Tensor::Contiguous(meta_.as<int32_t>() + store_pairs_, DType::kI32, {num_store_pairs_, 2}, Device::kCuda);
  a.sampled = Tensor::Contiguous(const_cast<int32_t*>(tokens), DType::kI32, {num_tokens}, Device::kCuda);
  return pc::FeedTokens(a, stream_.get());
}

Status DeviceExecutor::CommitTrees(std::span<const TreeCommit> commits) {
  if (sharded()) return Unimplemented("speculative verify on a sharded model");
  return model_->EnqueueCommit(commits, stream_.get());
}

Status DeviceExecutor::Draft(std::span<const DevicePairs> inputs, int32_t num_steps, std::vector<int32_t>* tokens,
                             std::vector<speculative::DepthCandidates>* candidates) {
  if (sharded()) return Unimplemented("drafting on a sharded model");
  if (!model_->has_drafter()) return Unimplemented("this model has no drafter on the device");
  const int64_t capacity = model_->draft_meta_capacity();
  const int64_t slots = options_.num_slots;
  const auto steps = static_cast<int64_t>(options_.max_draft_steps);
  if (draft_meta_.data() == nullptr) {
    PG_ASSIGN_OR_RETURN(draft_meta_host_, pc::PinnedHostBuffer::Allocate(static_cast<size_t>(capacity) * 4));
    PG_ASSIGN_OR_RETURN(draft_tokens_host_, pc::PinnedHostBuffer::Allocate(static_cast<size_t>(slots * steps) * 4));
    const auto k = static_cast<size_t>(options_.draft_candidates);
    if (k > 1) {
      PG_ASSIGN_OR_RETURN(draft_cand_tokens_host_, pc::PinnedHostBuffer::Allocate(static_cast<size_t>(slots * steps) * k * 4));
      PG_ASSIGN_OR_RETURN(draft_cand_logprobs_host_,
                          pc::PinnedHostBuffer::Allocate(static_cast<size_t>(slots * steps) * k * 4));
    }
    PG_ASSIGN_OR_RETURN(draft_meta_, allocator_->Allocate(static_cast<size_t>(capacity) * 4));
  }
  // The last call waited for its upload: the staging is free.
  StepMeta meta(draft_meta_host_.as<int32_t>(), draft_meta_.as<int32_t>(), capacity);
  PG_ASSIGN_OR_RETURN(const DeviceModel::DraftShape shape, model_->PlanDraft(inputs, num_steps, meta));
  const int64_t drafting = shape.num_drafting;
  cudaStream_t s = stream_.get();
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(draft_meta_.data(), meta.host(0), static_cast<size_t>(meta.size()) * 4,
                                          cudaMemcpyHostToDevice, s));
  if (graph_max_batch_ > 0 && shape.rows > 0) {
    // One graph per shape: the drafter's steps are many small launches.
    const std::tuple<int64_t, int64_t, int32_t> key{shape.rows, shape.drafting_rows, shape.num_steps};
    auto it = draft_graphs_.find(key);
    if (it == draft_graphs_.end()) {
      PG_RETURN_IF_ERROR(pc::Graph::BeginCapture(s));
      const Status enqueued = model_->EnqueueDraft(meta, s);
      PG_ASSIGN_OR_RETURN(pc::Graph graph, pc::Graph::EndCapture(s));
      PG_RETURN_IF_ERROR(enqueued);
      it = draft_graphs_.emplace(key, std::move(graph)).first;
    }
    PG_RETURN_IF_ERROR(it->second.Launch(s));
  } else {
    PG_RETURN_IF_ERROR(model_->EnqueueDraft(meta, s));
  }
  tokens->clear();
  if (drafting > 0) {
    const Tensor out = model_->draft_tokens();  // [slots, max_draft_steps]
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(draft_tokens_host_.data(), static_cast<size_t>(num_steps) * 4, out.data,
                                              static_cast<size_t>(out.shape[1]) * 4, static_cast<size_t>(num_steps) * 4,
                                              static_cast<size_t>(drafting), cudaMemcpyDeviceToHost, s));
  }
  const int64_t k = options_.draft_candidates;
  const bool want_candidates = candidates != nullptr && k > 1 && drafting > 0;
  if (want_candidates) {
    const Tensor cand_tokens = model_->draft_candidate_tokens();  // [slots, max_draft_steps, K]
    const Tensor cand_logprobs = model_->draft_candidate_logprobs();
    if (cand_tokens.data == nullptr || cand_logprobs.data == nullptr)
      return Internal("the drafter keeps no candidates per depth");
    const auto pitch = static_cast<size_t>(cand_tokens.shape[1] * k) * 4;
    const auto width = static_cast<size_t>(num_steps * k) * 4;
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(draft_cand_tokens_host_.data(), width, cand_tokens.data, pitch, width,
                                              static_cast<size_t>(drafting), cudaMemcpyDeviceToHost, s));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(draft_cand_logprobs_host_.data(), width, cand_logprobs.data, pitch, width,
                                              static_cast<size_t>(drafting), cudaMemcpyDeviceToHost, s));
  }
  PG_RETURN_IF_ERROR(stream_.Synchronize());
  const int32_t* host = draft_tokens_host_.as<int32_t>();
  tokens->assign(host, host + drafting * num_steps);
  if (candidates != nullptr) {
    candidates->clear();
    if (want_candidates) {
      const int32_t* ct = draft_cand_tokens_host_.as<int32_t>();
      const float* cl = draft_cand_logprobs_host_.as<float>();
      for (int64_t i = 0; i < drafting * num_steps; ++i) {
        speculative::DepthCandidates c;
        for (int64_t j = 0; j < k; ++j) {
          const int32_t t = ct[i * k + j];
          if (t < 0) break;  // fewer finite candidates than K
          c.tokens.push_back(t);
          c.logprobs.push_back(cl[i * k + j]);
        }
        candidates->push_back(std::move(c));
      }
    }
  }
  return Status::Ok();
}

Status DeviceExecutor::Forward(std::span<const ChunkView> chunks, std::vector<float>* logits) {
  PG_RETURN_IF_ERROR(Launch(chunks, [&](const Tensor& t, cudaStream_t s) -> Status {
    logits->resize(static_cast<size_t>(t.shape[0] * t.shape[1]));
    if (!logits->empty())
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits->data(), t.data, logits->size() * 4, cudaMemcpyDeviceToHost, s));
    return Status::Ok();
  }));
  return stream_.Synchronize();
}

Status DeviceExecutor::ProfileForward(std::span<const ChunkView> chunks, std::vector<OpProfile>* profile,
                                      double* total_ms) {
  if (sharded()) return Unimplemented("profiling runs one unsharded model (tensor parallel 1)");
  DeviceStep step;
  int64_t bucket = 0;
  PG_RETURN_IF_ERROR(Prepare(chunks, /*allow_graph=*/false, &step, &bucket));
  cudaStream_t s = stream_.get();
  const StepMeta meta(meta_host_[static_cast<size_t>(meta_turn_ ^ 1)].as<int32_t>(), meta_.as<int32_t>(),
                      meta_capacity_);
  const std::vector<std::string> names = model_->op_kinds();
  Profiler profiler(s, names.size());
  PG_ASSIGN_OR_RETURN(pc::Event start, pc::Event::Create(true));
  PG_ASSIGN_OR_RETURN(pc::Event stop, pc::Event::Create(true));
  PG_RETURN_IF_ERROR(start.Record(s));
  PG_RETURN_IF_ERROR(model_->Enqueue(step, meta, s, &profiler));
  PG_RETURN_IF_ERROR(stop.Record(s));
  PG_RETURN_IF_ERROR(model_->EnqueueSnapshots(chunks, step, s));
  PG_RETURN_IF_ERROR(stream_.Synchronize());
  PG_ASSIGN_OR_RETURN(float total, pc::Event::ElapsedMs(start, stop));
  *total_ms = total;
  return profiler.Collect(names, profile);
}

}  // namespace peregrine
