#include "runtime/cuda_model_runner.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/sampling.h"
#include "backend/cuda/ops/step_feed.h"
#include "backend/cuda/ops/token_bitmask.h"
#include "kernels/sampling.cuh"
#include "runtime/host_scoring.h"
#include "sampling/device_rows.h"
#include "sampling/token_bitmask.h"

namespace peregrine {

namespace {

constexpr size_t kTop = kernels::kSamplingMaxTopLogprobs;

Tensor DeviceView(const peregrine::cuda::DeviceBuffer& b, DType t, Shape s) {
  return Tensor::Contiguous(b.data(), t, s, Device::kCuda);
}

// The state sequential decoding would sample node `j` of a verify tree with: the request's,
// with the tokens on the node's path below the root appended and one draw per token sampled
// before (the draw of its depth), as the CPU runner does.
SequenceSamplingState NodeState(const SamplingParams& params, const SequenceSamplingState& request,
                                const speculative::DraftTree& tree, int64_t j) {
  std::vector<int32_t> path;
  for (int64_t k = j; k > 0; k = tree.parents[static_cast<size_t>(k)]) path.push_back(tree.tokens[static_cast<size_t>(k)]);
  SequenceSamplingState node = request;
  const auto draws = static_cast<unsigned long long>(DrawsPerToken(params));
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    node.Append(*it);
    node.rng().discard(draws);
  }
  return node;
}

// The device rows of a verify tree's nodes, each with the state NodeState gives it, without
// copying the request's state per node: the path's tokens are counted beside the state's, and
// depth d's generator is the request's past d tokens' draws.
void AppendNodeRows(const SamplingParams& params, SequenceSamplingState& request,
                    const speculative::DraftTree& tree, int64_t vocab, DeviceSamplingBatch& batch,
                    std::vector<std::mt19937_64>* rng_before) {
  const auto draws = static_cast<unsigned long long>(DrawsPerToken(params));
  std::vector<std::mt19937_64> depth_rng;
  std::vector<int32_t> path;
  for (int64_t j = 0; j < tree.num_nodes(); ++j) {
    path.clear();
    for (int64_t k = j; k > 0; k = tree.parents[static_cast<size_t>(k)]) path.push_back(tree.tokens[static_cast<size_t>(k)]);
    std::reverse(path.begin(), path.end());
    while (depth_rng.size() <= path.size()) {
      if (depth_rng.empty()) {
        depth_rng.push_back(request.rng());  // a copy: the request's generator is not moved
      } else {
        depth_rng.push_back(depth_rng.back());
        depth_rng.back().discard(draws);
      }
    }
    std::mt19937_64 rng = depth_rng[path.size()];
    rng_before->emplace_back();
    AppendDeviceRowAfter(params, request, path, rng, vocab, batch, &rng_before->back());
  }
}

// Adds the wall time of its scope, less what `exclude` grew by meanwhile, to `*total`.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* total, const double* exclude = nullptr)
      : total_(total), exclude_(exclude), exclude_before_(exclude != nullptr ? *exclude : 0.0) {}
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;
  ~ScopedSeconds() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    *total_ += s - (exclude_ != nullptr ? *exclude_ - exclude_before_ : 0.0);
  }

 private:
  double* total_;
  const double* exclude_;
  double exclude_before_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

CudaModelRunner::CudaModelRunner(std::unique_ptr<DeviceExecutor> executor, bool device_sampling, bool overlap,
                                 const speculative::SpeculativeConfig& speculative)
    : executor_(std::move(executor)),
      device_sampling_(device_sampling),
      overlap_(overlap),
      speculative_(speculative),
      slot_positions_(static_cast<size_t>(executor_->kv_capacity().num_slots), -1) {}

int64_t CudaModelRunner::VerifyRows(const speculative::SpeculativeConfig& speculative, int64_t num_slots) {
  return speculative.enabled() ? num_slots * (1 + static_cast<int64_t>(speculative.max_nodes())) : 0;
}

Status CudaModelRunner::ReadDeviceRow(LaunchSlot& slot, size_t d, const SamplingParams& params,
                                      SequenceSamplingState* state, SampleResult* out) {
  if (slot.out_status.as<int32_t>()[d] != kernels::kSamplingOk) {
    if (state == nullptr) return Internal("a row the device gave up needs its sampling state");
    // The device gave this row up (too many candidates): finish it on the host from the
    // device's edited row, with the RNG as it was before this step's draw.
    const int64_t vocab = executor_->config().vocab_size;
    std::vector<float> row_logits(static_cast<size_t>(vocab));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(row_logits.data(), slot.saved_logits_d.as<float>() + d * static_cast<size_t>(vocab),
                                       row_logits.size() * 4, cudaMemcpyDeviceToHost));
    const auto begin = static_cast<size_t>(slot.batch.edit_offsets[d]);
    const auto end = static_cast<size_t>(slot.batch.edit_offsets[d + 1]);
    *out = SampleOverflowRow(row_logits, std::span(slot.batch.edits).subspan(begin, end - begin),
                             std::span<const float>(slot.out_edit_raw.as<float>() + begin, end - begin), params, *state,
                             slot.rng_before[d]);
    return Status::Ok();
  }
  *out = SampleResult{};
  out->token = slot.out_tokens.as<int32_t>()[d];
  if (params.logprobs >= 0) {
    out->logprob = slot.out_logprobs.as<float>()[d];
    const int32_t* top_tokens = slot.out_top_tokens.as<int32_t>();
    const float* top_logprobs = slot.out_top_logprobs.as<float>();
    for (int32_t k = 0; k < std::min<int32_t>(params.logprobs, static_cast<int32_t>(kTop)); ++k) {
      const size_t at = d * kTop + static_cast<size_t>(k);
      if (top_tokens[at] < 0) break;
      out->top_logprobs.push_back({top_tokens[at], top_logprobs[at]});
    }
  }
  if (state != nullptr) state->Append(out->token);
  return Status::Ok();
}

Status CudaModelRunner::AcceptTree(LaunchSlot& slot, size_t row, bool skipped, SampleResult* result,
                                    std::vector<SampleResult>* drafts, TreeCommit* commit) {
  const speculative::DraftTree& tree = slot.trees[row];
  const size_t first = slot.first_row[row];
  const auto n = static_cast<size_t>(tree.num_nodes());
  const SamplingParams& params = *slot.sampling[row].params;
  std::vector<SampleResult> targets(n);
  std::vector<int32_t> target_tokens(n);
  const int32_t* status = slot.out_status.as<int32_t>();
  for (size_t j = 0; j < n; ++j) {
    if (status[first + j] == kernels::kSamplingOk) {
      PG_RETURN_IF_ERROR(ReadDeviceRow(slot, first + j, params, nullptr, &targets[j]));
    } else {
      // Finished on the host from the state the node sampled with: the request's, with the
      // path's tokens appended (the RNG is rewound to the node's own).
      SequenceSamplingState node = NodeState(params, *slot.sampling[row].state, tree, static_cast<int64_t>(j));
      PG_RETURN_IF_ERROR(ReadDeviceRow(slot, first + j, params, &node, &targets[j]));
    }
    target_tokens[j] = targets[j].token;
  }
  PG_ASSIGN_OR_RETURN(speculative::Acceptance acc, speculative::Accept(tree, target_tokens));
  std::vector<int32_t> path = {0};
  path.insert(path.end(), acc.nodes.begin(), acc.nodes.end());
  commit->slot = slot.row_slots[row];
  commit->nodes = path;
  slot_positions_[static_cast<size_t>(commit->slot)] = slot.first_positions[row] + static_cast<int64_t>(path.size());
  ++spec_counts_.num_drafts;
  spec_counts_.num_draft_tokens += static_cast<int64_t>(n) - 1;
  spec_counts_.num_accepted_tokens += static_cast<int64_t>(acc.nodes.size());
  if (spec_counts_.accepted_per_position.size() < static_cast<size_t>(speculative_.lookahead()))
    spec_counts_.accepted_per_position.resize(static_cast<size_t>(speculative_.lookahead()), 0);
  for (size_t k = 0; k < acc.nodes.size() && k < spec_counts_.accepted_per_position.size(); ++k)
    ++spec_counts_.accepted_per_position[k];
  if (skipped) return Status::Ok();
  for (size_t k = 0; k + 1 < path.size(); ++k) drafts->push_back(targets[static_cast<size_t>(path[k])]);
  *result = targets[static_cast<size_t>(path.back())];
  // The request's state as sequential decoding leaves it: each kept token, one draw each.
  SequenceSamplingState& state = *slot.sampling[row].state;
  const auto draws = static_cast<unsigned long long>(DrawsPerToken(params));
  for (size_t k = 0; k < path.size(); ++k) {
    state.Append(k + 1 < path.size() ? tree.tokens[static_cast<size_t>(path[k + 1])] : result->token);
    state.rng().discard(draws);
  }
  return Status::Ok();
}

CudaModelRunner::~CudaModelRunner() {
  // Launched steps write into this runner's pinned buffers: let them finish first (a step
  // still waiting for its masks is released unconstrained; nobody reads its tokens).
  for (int s : launched_) {
    LaunchSlot& slot = launch_slots_[static_cast<size_t>(s)];
    ReleaseGate(slot);
    (void)slot.done.Synchronize();
  }
  CloseKvPeers();
}

void CudaModelRunner::ReleaseGate(LaunchSlot& slot) {
  if (slot.deferred.empty()) return;
  for (const auto& [row, mask] : slot.deferred) slot.row_mask_h.as<int32_t>()[row] = -1;
  slot.deferred.clear();
  slot.gate.Open(slot.gate_value);
}

Status CudaModelRunner::StageMasks(LaunchSlot& slot, std::span<const RunnerSampling> sampling) {
  namespace pc = peregrine::cuda;
  const int64_t vocab = executor_->config().vocab_size;
  const size_t words = static_cast<size_t>(TokenMaskWords(vocab));
  slot.masks = 0;
  slot.deferred.clear();
  size_t wanted = 0;
  for (const RunnerSampling& smp : sampling) wanted += smp.mask != RowMask::kNone;
  if (wanted == 0) return Status::Ok();
  if (wanted > slot.mask_capacity || slot.row_mask_h.bytes() < sampling.size() * 4) {
    const size_t n = std::max({wanted, 2 * slot.mask_capacity, sampling.size()});
    PG_ASSIGN_OR_RETURN(slot.row_mask_h, pc::PinnedHostBuffer::Allocate(std::max(n, slot.row_capacity) * 4));
    PG_ASSIGN_OR_RETURN(slot.row_mask_d, executor_->allocator().Allocate(std::max(n, slot.row_capacity) * 4));
    PG_ASSIGN_OR_RETURN(slot.masks_h, pc::PinnedHostBuffer::Allocate(n * words * 4));
    PG_ASSIGN_OR_RETURN(slot.masks_d, executor_->allocator().Allocate(n * words * 4));
    slot.mask_capacity = n;
  }
  if (!slot.gate.valid()) {
    PG_ASSIGN_OR_RETURN(slot.gate, pc::HostGate::Create());
  }
  int32_t* row_mask = slot.row_mask_h.as<int32_t>();
  uint32_t* masks = slot.masks_h.as<uint32_t>();
  for (size_t i = 0; i < sampling.size(); ++i) {
    row_mask[i] = -1;
    if (sampling[i].mask == RowMask::kNone) continue;
    const auto m = static_cast<int32_t>(slot.masks++);
    row_mask[i] = m;
    if (sampling[i].mask == RowMask::kReady) {
      if (sampling[i].mask_words == nullptr) return Internal("a ready mask without its words");
      std::memcpy(masks + static_cast<size_t>(m) * words, sampling[i].mask_words, words * 4);
    } else {
      slot.deferred.emplace_back(i, m);
    }
  }
  if (!slot.deferred.empty()) ++slot.gate_value;
  return Status::Ok();
}

Status CudaModelRunner::SupplyMasks(std::span<const uint32_t* const> masks) {
  if (last_launched_ < 0 || launched_.empty() || launched_.back() != last_launched_)
    return Internal("masks supplied with no launched step");
  LaunchSlot& slot = launch_slots_[static_cast<size_t>(last_launched_)];
  if (masks.size() != slot.deferred.size()) {
    ReleaseGate(slot);
    return Internal("one mask per deferred row expected");
  }
  const size_t words = static_cast<size_t>(TokenMaskWords(executor_->config().vocab_size));
  for (size_t k = 0; k < masks.size(); ++k) {
    const auto [row, m] = slot.deferred[k];
    if (masks[k] == nullptr) {
      slot.row_mask_h.as<int32_t>()[row] = -1;
    } else {
      std::memcpy(slot.masks_h.as<uint32_t>() + static_cast<size_t>(m) * words, masks[k], words * 4);
    }
  }
  slot.deferred.clear();
  slot.gate.Open(slot.gate_value);
  return Status::Ok();
}

std::vector<int32_t> CudaModelRunner::eos_token_ids() const {
  std::vector<int32_t> ids;
  for (int64_t id : executor_->config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

Status CudaModelRunner::PlanChunks(std::span<const RunnerChunk> chunks) {
  step_.clear();
  for (const RunnerChunk& chunk : chunks) {
    const ChunkView& v = chunk.view;
    if (v.slot < 0 || v.slot >= static_cast<int32_t>(slot_positions_.size()))
      return Internal("KV slot " + std::to_string(v.slot) + " outside the device pools");
    const int64_t at = slot_positions_[static_cast<size_t>(v.slot)];
    const bool restarts = v.first_position == 0 || v.restore >= 0;
    if (!restarts && v.first_position != at)
      return Internal("runner state out of step for sequence " + std::to_string(chunk.seq_id));
    step_.push_back(v);
  }
  return Status::Ok();
}

void CudaModelRunner::Advance(std::span<const RunnerChunk> chunks, const Status& status) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    // A verified chain's slot stands where its commit (Collect) puts it.
    const bool chain = i < step_.size() && !step_[i].tree_parents.empty();
    slot_positions_[static_cast<size_t>(chunks[i].view.slot)] =
        status.ok() && !chain ? chunks[i].view.first_position + chunks[i].view.num_tokens : -1;
  }
}

Status CudaModelRunner::EnsureCapacity(LaunchSlot& slot, size_t rows, size_t edits) {
  namespace pc = peregrine::cuda;
  pc::CachingAllocator& a = executor_->allocator();
  const size_t vocab = static_cast<size_t>(executor_->config().vocab_size);
  if (rows > slot.row_capacity) {
    const size_t n = std::max<size_t>(rows, 2 * slot.row_capacity);
    PG_ASSIGN_OR_RETURN(slot.in_rows, pc::PinnedHostBuffer::Allocate(n * sizeof(DeviceSamplingRow)));
    PG_ASSIGN_OR_RETURN(slot.in_offsets, pc::PinnedHostBuffer::Allocate((n + 1) * 4));
    PG_ASSIGN_OR_RETURN(slot.out_tokens, pc::PinnedHostBuffer::Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.out_logprobs, pc::PinnedHostBuffer::Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.out_status, pc::PinnedHostBuffer::Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.out_top_tokens, pc::PinnedHostBuffer::Allocate(n * kTop * 4));
    PG_ASSIGN_OR_RETURN(slot.out_top_logprobs, pc::PinnedHostBuffer::Allocate(n * kTop * 4));
    PG_ASSIGN_OR_RETURN(slot.rows_d, a.Allocate(n * sizeof(DeviceSamplingRow)));
    PG_ASSIGN_OR_RETURN(slot.offsets_d, a.Allocate((n + 1) * 4));
    PG_ASSIGN_OR_RETURN(slot.tokens_d, a.Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.logprobs_d, a.Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.top_tokens_d, a.Allocate(n * kTop * 4));
    PG_ASSIGN_OR_RETURN(slot.top_logprobs_d, a.Allocate(n * kTop * 4));
    PG_ASSIGN_OR_RETURN(slot.status_d, a.Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.saved_logits_d, a.Allocate(n * vocab * 4));
    slot.row_capacity = n;
  }
  if (edits > slot.edit_capacity) {
    const size_t n = std::max<size_t>(edits, 2 * slot.edit_capacity);
    PG_ASSIGN_OR_RETURN(slot.in_edits, pc::PinnedHostBuffer::Allocate(n * sizeof(DeviceLogitEdit)));
    PG_ASSIGN_OR_RETURN(slot.out_edit_raw, pc::PinnedHostBuffer::Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(slot.edits_d, a.Allocate(n * sizeof(DeviceLogitEdit)));
    PG_ASSIGN_OR_RETURN(slot.edit_raw_d, a.Allocate(n * 4));
    slot.edit_capacity = n;
  }
  if (slot.done.get() == nullptr) {
    PG_ASSIGN_OR_RETURN(slot.done, pc::Event::Create(false));
  }
  return Status::Ok();
}

Status CudaModelRunner::EnqueueSampling(LaunchSlot& slot, const Tensor& logits, cudaStream_t stream) {
  const size_t r = slot.rows, e = slot.edits;
  if (r > 0) {
    const int64_t rr = static_cast<int64_t>(r), ee = static_cast<int64_t>(e);
    const int64_t vocab = executor_->config().vocab_size;
    std::memcpy(slot.in_rows.data(), slot.batch.rows.data(), r * sizeof(DeviceSamplingRow));
    std::memcpy(slot.in_offsets.data(), slot.batch.edit_offsets.data(), (r + 1) * 4);
    if (e > 0) std::memcpy(slot.in_edits.data(), slot.batch.edits.data(), e * sizeof(DeviceLogitEdit));
    auto h2d = [&](const peregrine::cuda::DeviceBuffer& d, const peregrine::cuda::PinnedHostBuffer& h, size_t bytes) {
      return cudaMemcpyAsync(d.data(), h.data(), bytes, cudaMemcpyHostToDevice, stream);
    };
    auto d2h = [&](const peregrine::cuda::PinnedHostBuffer& h, const peregrine::cuda::DeviceBuffer& d, size_t bytes) {
      return cudaMemcpyAsync(h.data(), d.data(), bytes, cudaMemcpyDeviceToHost, stream);
    };
    if (slot.masks > 0) {
      // Deferred masks are written by the host while the forward runs: wait for them here.
      if (!slot.deferred.empty()) PG_RETURN_IF_ERROR(slot.gate.Wait(stream, slot.gate_value));
      const size_t words = static_cast<size_t>(TokenMaskWords(vocab));
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.row_mask_d.data(), slot.row_mask_h.data(), r * 4,
                                              cudaMemcpyHostToDevice, stream));
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.masks_d.data(), slot.masks_h.data(), slot.masks * words * 4,
                                              cudaMemcpyHostToDevice, stream));
      peregrine::cuda::TokenBitmaskArgs m;
      m.logits = logits;
      m.masks = DeviceView(slot.masks_d, DType::kI32, {static_cast<int64_t>(slot.masks), static_cast<int64_t>(words)});
      m.row_mask = DeviceView(slot.row_mask_d, DType::kI32, {rr});
      PG_RETURN_IF_ERROR(peregrine::cuda::ApplyTokenBitmask(m, stream));
    }
    PG_CUDA_RETURN_IF_ERROR(h2d(slot.rows_d, slot.in_rows, r * sizeof(DeviceSamplingRow)));
    PG_CUDA_RETURN_IF_ERROR(h2d(slot.offsets_d, slot.in_offsets, (r + 1) * 4));
    if (e > 0) PG_CUDA_RETURN_IF_ERROR(h2d(slot.edits_d, slot.in_edits, e * sizeof(DeviceLogitEdit)));
    peregrine::cuda::SamplingArgs a;
    a.logits = logits;
    a.rows = DeviceView(slot.rows_d, DType::kU8, {rr, static_cast<int64_t>(sizeof(DeviceSamplingRow))});
    a.edit_offsets = DeviceView(slot.offsets_d, DType::kI32, {rr + 1});
    if (e > 0) {
      a.edits = DeviceView(slot.edits_d, DType::kU8, {ee, static_cast<int64_t>(sizeof(DeviceLogitEdit))});
      a.edit_raw = DeviceView(slot.edit_raw_d, DType::kF32, {ee});
    }
    a.tokens = DeviceView(slot.tokens_d, DType::kI32, {rr});
    a.logprobs = DeviceView(slot.logprobs_d, DType::kF32, {rr});
    a.top_tokens = DeviceView(slot.top_tokens_d, DType::kI32, {rr, static_cast<int64_t>(kTop)});
    a.top_logprobs = DeviceView(slot.top_logprobs_d, DType::kF32, {rr, static_cast<int64_t>(kTop)});
    a.status = DeviceView(slot.status_d, DType::kI32, {rr});
    PG_RETURN_IF_ERROR(peregrine::cuda::Sample(a, stream));
    // Rows the device gave up on keep their edited logits here: the next step overwrites the
    // logits before the host gets to finish them.
    peregrine::cuda::CopyFlaggedRowsArgs save;
    save.src = logits;
    save.dst = DeviceView(slot.saved_logits_d, DType::kF32, {rr, vocab});
    save.flags = a.status;
    PG_RETURN_IF_ERROR(peregrine::cuda::CopyFlaggedRows(save, stream));
    // The next step's fed chunks read these tokens from their slots. A step with chains is
    // not followed by fed chunks (no overlap while speculating): its rows are per node.
    if (!slot.verifies) PG_RETURN_IF_ERROR(executor_->StoreSampledTokens(slot.tokens_d.as<int32_t>(), rr));
    PG_CUDA_RETURN_IF_ERROR(d2h(slot.out_tokens, slot.tokens_d, r * 4));
    PG_CUDA_RETURN_IF_ERROR(d2h(slot.out_logprobs, slot.logprobs_d, r * 4));
    PG_CUDA_RETURN_IF_ERROR(d2h(slot.out_status, slot.status_d, r * 4));
    PG_CUDA_RETURN_IF_ERROR(d2h(slot.out_top_tokens, slot.top_tokens_d, r * kTop * 4));
    PG_CUDA_RETURN_IF_ERROR(d2h(slot.out_top_logprobs, slot.top_logprobs_d, r * kTop * 4));
    if (e > 0) PG_CUDA_RETURN_IF_ERROR(d2h(slot.out_edit_raw, slot.edit_raw_d, e * 4));
  }
  PG_RETURN_IF_ERROR(step_end_[slot.timing].Record(stream));
  return slot.done.Record(stream);
}

Status CudaModelRunner::PlanRows(LaunchSlot& slot, std::span<const RunnerChunk> chunks, size_t num_sampling) {
  slot.sample_rows.clear();
  slot.scorer.Clear();
  slot.compacts = false;
  int64_t row = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const RunnerChunk& chunk = chunks[ci];
    const ChunkView& v = ci < step_.size() ? step_[ci] : chunk.view;
    const int64_t rows = v.logit_rows();
    if (!chunk.scoring.targets.empty()) {
      if (!v.all_logits ||
          static_cast<int64_t>(chunk.scoring.targets.size()) > rows - (v.needs_logits ? 1 : 0))
        return Internal("scoring targets without a logits row each");
      slot.scorer.AddChunk(row, chunk.scoring);
    }
    row += rows;
    if (!v.needs_logits) continue;
    // A verify chain samples every node; other chunks their last token.
    for (int64_t k = v.tree_parents.empty() ? row - 1 : row - rows; k < row; ++k) {
      slot.compacts = slot.compacts || k != static_cast<int64_t>(slot.sample_rows.size());
      slot.sample_rows.push_back(static_cast<int32_t>(k));
    }
  }
  size_t sampled_chunks = 0;
  for (const ChunkView& v : step_) sampled_chunks += v.needs_logits ? 1 : 0;
  if (sampled_chunks != num_sampling) return Internal("one sampling entry per sampled chunk expected");
  return Status::Ok();
}

Status CudaModelRunner::EnqueueScoring(LaunchSlot& slot, const Tensor& logits, cudaStream_t stream, Tensor* sampled) {
  *sampled = logits;
  if (slot.scorer.empty() && !slot.compacts) return Status::Ok();
  PG_RETURN_IF_ERROR(slot.scorer.Enqueue(logits, stream, executor_->allocator()));
  // Sampling row i moves to row i, in increasing order: its source (row >= i) is never a
  // row an earlier move wrote, and a later move reads only rows above what it writes.
  const size_t width = static_cast<size_t>(logits.shape[1]);
  float* base = logits.as<float>();
  for (size_t i = 0; i < slot.sample_rows.size(); ++i) {
    const auto from = static_cast<size_t>(slot.sample_rows[i]);
    if (from == i) continue;
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + i * width, base + from * width, width * 4,
                                            cudaMemcpyDeviceToDevice, stream));
  }
  *sampled = Tensor::Contiguous(base, DType::kF32, {static_cast<int64_t>(slot.sample_rows.size()),
                                                    static_cast<int64_t>(width)}, Device::kCuda);
  return Status::Ok();
}

Status CudaModelRunner::LaunchHostSampled(LaunchSlot& slot, std::span<const RunnerChunk> chunks,
                                          std::span<const RunnerSampling> sampling) {
  std::vector<float> logits;
  PG_RETURN_IF_ERROR(executor_->Forward(step_, &logits));
  const auto vocab = static_cast<size_t>(executor_->config().vocab_size);
  PG_RETURN_IF_ERROR(PlanRows(slot, chunks, sampling.size()));
  slot.host_scores.clear();
  PG_RETURN_IF_ERROR(ScoreOnHost(chunks, logits, executor_->config().vocab_size, &slot.host_scores));
  slot.host_results.clear();
  for (size_t i = 0; i < sampling.size(); ++i) {
    std::span<float> row(logits.data() + static_cast<size_t>(slot.sample_rows[i]) * vocab, vocab);
    if (sampling[i].mask == RowMask::kDeferred) return Internal("host sampling takes no deferred masks");
    if (sampling[i].mask == RowMask::kReady)
      ApplyTokenBitmask(row, std::span(sampling[i].mask_words, static_cast<size_t>(TokenMaskWords(static_cast<int64_t>(vocab)))));
    slot.host_results.push_back(Sample(row, *sampling[i].params, *sampling[i].state));
  }
  return Status::Ok();
}

Status CudaModelRunner::Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) {
  if (static_cast<int>(launched_.size()) >= max_in_flight()) return Internal("too many launched steps");
  const ScopedSeconds timer(&host_time_.launch_s);
  const int index = (last_launched_ + 1) % static_cast<int>(launch_slots_.size());
  LaunchSlot& slot = launch_slots_[static_cast<size_t>(index)];
  PG_RETURN_IF_ERROR(PlanChunks(chunks));
  for (const ChunkView& v : step_)
    if (v.feeds_last && !device_sampling_) return Internal("a fed chunk needs device sampling");
  slot.slots.clear();
  for (const RunnerChunk& chunk : chunks) slot.slots.push_back(chunk.view.slot);
  slot.sampling.assign(sampling.begin(), sampling.end());
  if (!device_sampling_) {
    const Status s = LaunchHostSampled(slot, chunks, sampling);
    Advance(chunks, s);
    PG_RETURN_IF_ERROR(s);
    slot.rows = sampling.size();
    launched_.push_back(index);
    last_launched_ = index;
    return Status::Ok();
  }

  const int64_t vocab = executor_->config().vocab_size;
  PlanVerify(slot, chunks, sampling);
  PG_RETURN_IF_ERROR(PlanRows(slot, chunks, sampling.size()));
  slot.batch.Clear();
  slot.rng_before.clear();
  slot.first_row.clear();
  slot.num_nodes.clear();
  for (size_t i = 0; i < sampling.size(); ++i) {
    slot.first_row.push_back(slot.rng_before.size());
    const speculative::DraftTree& tree = slot.trees[i];
    if (tree.num_nodes() == 0) {
      slot.num_nodes.push_back(1);
      slot.rng_before.emplace_back();
      AppendDeviceRow(*sampling[i].params, *sampling[i].state, vocab, slot.batch, &slot.rng_before.back());
      continue;
    }
    // A verify tree: node j samples with the state sequential decoding would have there (its
    // path's tokens below the root appended, one draw per token before it: the draw of its
    // depth); the request's own state moves in Collect, by the tokens kept.
    slot.num_nodes.push_back(static_cast<size_t>(tree.num_nodes()));
    AppendNodeRows(*sampling[i].params, *sampling[i].state, tree, vocab, slot.batch, &slot.rng_before);
  }
  slot.row_slots.clear();
  slot.records.clear();
  int64_t step_row = 0, sampling_row = 0;
  for (size_t ci = 0; ci < step_.size(); ++ci) {
    const ChunkView& v = step_[ci];
    if (speculative_.needs_model_drafter() && chunks[ci].lookahead >= 0 && !v.feeds_last) {
      LaunchSlot::ChunkRecord r;
      r.seq_id = chunks[ci].seq_id;
      r.slot = v.slot;
      r.first_position = v.first_position;
      r.first_row = step_row;
      r.tokens.assign(v.tokens.begin(), v.tokens.end());
      r.lookahead = chunks[ci].lookahead;
      r.sampling_row = v.needs_logits ? sampling_row : -1;
      r.restarts = v.first_position == 0 || v.restore >= 0;
      slot.records.push_back(std::move(r));
    }
    step_row += v.num_tokens;
    if (v.needs_logits) {
      slot.row_slots.push_back(v.slot);
      ++sampling_row;
    }
  }
  slot.rows = slot.batch.num_rows();
  slot.edits = slot.batch.edits.size();
  PG_RETURN_IF_ERROR(EnsureCapacity(slot, std::max<size_t>(slot.rows, 1), slot.edits));
  PG_RETURN_IF_ERROR(StageMasks(slot, sampling));
  slot.timing = num_launches_ % step_start_.size();
  for (size_t i = 0; i < step_start_.size() && step_start_[i].get() == nullptr; ++i) {
    PG_ASSIGN_OR_RETURN(step_start_[i], peregrine::cuda::Event::Create(true));
    PG_ASSIGN_OR_RETURN(step_end_[i], peregrine::cuda::Event::Create(true));
  }
  PG_RETURN_IF_ERROR(step_start_[slot.timing].Record(executor_->stream()));

  auto hook = [&](const Tensor& logits, cudaStream_t stream) {
    Tensor sampled;
    PG_RETURN_IF_ERROR(EnqueueScoring(slot, logits, stream, &sampled));
    return EnqueueSampling(slot, sampled, stream);
  };
  const Status s = executor_->Launch(step_, hook);
  Advance(chunks, s);
  if (!s.ok()) {
    ReleaseGate(slot);  // the stream may already wait on it
    // Nothing waits on this slot; its RNG draws are rolled back so a retry draws the same.
    for (size_t i = 0; i < sampling.size(); ++i)
      if (slot.num_nodes[i] == 1) sampling[i].state->rng() = slot.rng_before[slot.first_row[i]];
    return s;
  }
  launched_.push_back(index);
  last_launched_ = index;
  ++num_launches_;
  return Status::Ok();
}

Status CudaModelRunner::Collect(std::span<const uint8_t> skip, CollectedStep* collected) {
  std::vector<SampleResult>* results = &collected->samples;
  std::vector<uint8_t>* refeed_failed = &collected->refeed_failed;
  std::vector<ChunkScores>* scores = &collected->scores;
  collected->drafts.assign(skip.size(), {});
  if (launched_.empty()) return Internal("no launched step to collect");
  const int index = launched_.front();
  launched_.pop_front();
  LaunchSlot& slot = launch_slots_[static_cast<size_t>(index)];
  if (!slot.deferred.empty()) {
    // The engine never supplied this step's masks: release the device and fail the step
    // rather than hand out unconstrained tokens.
    ReleaseGate(slot);
    (void)slot.done.Synchronize();
    for (int32_t state_slot : slot.slots) slot_positions_[static_cast<size_t>(state_slot)] = -1;
    return Internal("a step was collected before its deferred masks arrived");
  }
  if (!device_sampling_) {
    if (skip.size() != slot.host_results.size()) return Internal("collect: one skip flag per sampling row expected");
    results->assign(slot.host_results.size(), SampleResult{});
    refeed_failed->assign(slot.host_results.size(), 0);
    for (size_t i = 0; i < skip.size(); ++i)
      if (!skip[i]) (*results)[i] = std::move(slot.host_results[i]);
    *scores = std::move(slot.host_scores);
    return Status::Ok();
  }
  if (Status s = slot.done.Synchronize(); !s.ok()) {
    for (int32_t state_slot : slot.slots) slot_positions_[static_cast<size_t>(state_slot)] = -1;
    return s;
  }
  // Device time: the step itself, and the gap since the previous step ended (the device
  // waited for the host) unless the engine ran out of work in between.
  if (auto busy = peregrine::cuda::Event::ElapsedMs(step_start_[slot.timing], step_end_[slot.timing]); busy.ok())
    device_time_.busy_s += *busy * 1e-3;
  if (last_timing_ >= 0 && !idle_since_collect_) {
    // The speculative work enqueued after the last step (timed below) ran in this gap.
    auto gap = peregrine::cuda::Event::ElapsedMs(step_end_[static_cast<size_t>(last_timing_)], step_start_[slot.timing]);
    if (gap.ok() && *gap - spec_gap_ms_ > 0.0f) device_time_.idle_s += (*gap - spec_gap_ms_) * 1e-3;
  }
  spec_gap_ms_ = 0.0f;
  last_timing_ = static_cast<int64_t>(slot.timing);
  idle_since_collect_ = false;
  ++device_time_.steps;
  const ScopedSeconds timer(&host_time_.collect_s, &host_time_.draft_s);

  const size_t r = slot.first_row.size();  // the engine's sampling rows (device rows: slot.rows)
  if (skip.size() != r) return Internal("collect: one skip flag per sampling row expected");
  PG_ASSIGN_OR_RETURN(*scores, slot.scorer.Read());
  const int32_t* status = slot.out_status.as<int32_t>();
  results->assign(r, SampleResult{});
  refeed_failed->assign(r, 0);
  std::vector<TreeCommit> commits;
  for (size_t row = 0; row < r; ++row) {
    if (slot.num_nodes[row] > 1) {
      // Nothing reads a verified row's token from the device (no fed chunk follows).
      commits.emplace_back();
      PG_RETURN_IF_ERROR(AcceptTree(slot, row, skip[row] != 0, &(*results)[row], &collected->drafts[row],
                                     &commits.back()));
      continue;
    }
    const size_t i = slot.first_row[row];  // its device row
    if (status[i] != kernels::kSamplingOk) (*refeed_failed)[row] = 1;
    if (skip[row]) continue;
    PG_RETURN_IF_ERROR(
        ReadDeviceRow(slot, i, *slot.sampling[row].params, slot.sampling[row].state, &(*results)[row]));
  }
  // The device time of the commits and the drafter, between this step and the next (when no
  // later step is in flight: its work would be on the stream in between).
  const bool speculative_work = launched_.empty() && (!commits.empty() || !slot.records.empty());
  if (speculative_work) {
    if (spec_start_.get() == nullptr) {
      PG_ASSIGN_OR_RETURN(spec_start_, peregrine::cuda::Event::Create(true));
      PG_ASSIGN_OR_RETURN(spec_end_, peregrine::cuda::Event::Create(true));
    }
    PG_RETURN_IF_ERROR(spec_start_.Record(executor_->stream()));
  }
  // Every chain keeps its accepted prefix before the next step runs (stream order).
  if (!commits.empty()) {
    if (Status c = executor_->CommitTrees(commits); !c.ok()) {
      for (const TreeCommit& commit : commits) slot_positions_[static_cast<size_t>(commit.slot)] = -1;
      return c;
    }
  }
  if (!slot.records.empty()) {
    const ScopedSeconds draft_timer(&host_time_.draft_s);
    if (Status d = FollowDrafter(slot, skip, *results, commits); !d.ok()) {
      // The drafters start over; the target's state is intact.
      for (SlotDrafter& drafter : drafters_) drafter = {};
      return d;
    }
  }
  if (speculative_work) {
    // The drafter waited for its tokens, so this wait is short; without a drafter it waits
    // for the commits, which the next step would wait for anyway.
    PG_RETURN_IF_ERROR(spec_end_.Record(executor_->stream()));
    PG_RETURN_IF_ERROR(spec_end_.Synchronize());
    PG_ASSIGN_OR_RETURN(const float ms, peregrine::cuda::Event::ElapsedMs(spec_start_, spec_end_));
    device_time_.draft_s += ms * 1e-3;
    spec_gap_ms_ = ms;
  }
  return Status::Ok();
}

}  // namespace peregrine
