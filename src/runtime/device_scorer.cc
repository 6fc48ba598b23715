#include "runtime/device_scorer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/sampling.h"
#include "backend/cuda/ops/step_feed.h"
#include "kernels/sampling.cuh"

namespace peregrine {

namespace {

constexpr size_t kTop = kernels::kSamplingMaxTopLogprobs;
// Added to a scored row's target: above any finite logit, so greedy picks the target.
constexpr double kForceTarget = 1e30;

// Byte offsets of the staging areas, each aligned for the ops' tensor checks.
constexpr size_t kAlign = 256;
size_t After(size_t offset, size_t bytes) { return (offset + bytes + kAlign - 1) / kAlign * kAlign; }

struct InLayout {
  size_t rows, edits, offsets, items, targets, bytes;
  InLayout(size_t r, size_t n)
      : rows(0),
        edits(After(rows, r * sizeof(DeviceSamplingRow))),
        offsets(After(edits, n * sizeof(DeviceLogitEdit))),
        items(After(offsets, (r + 1) * 4)),
        targets(After(items, n * 4)),
        bytes(After(targets, n * 4)) {}
};
struct OutLayout {
  size_t tokens, logprobs, status, top_tokens, top_logprobs, counts, edit_raw, bytes;
  OutLayout(size_t r, size_t n)
      : tokens(0),
        logprobs(After(tokens, r * 4)),
        status(After(logprobs, r * 4)),
        top_tokens(After(status, r * 4)),
        top_logprobs(After(top_tokens, r * kTop * 4)),
        counts(After(top_logprobs, r * kTop * 4)),
        edit_raw(After(counts, n * 4)),
        bytes(After(edit_raw, n * 4)) {}
};

Tensor View(const cuda::DeviceBuffer& b, size_t offset, DType t, Shape s) {
  return Tensor::Contiguous(static_cast<char*>(b.data()) + offset, t, s, Device::kCuda);
}

template <typename T>
const T* At(const cuda::PinnedHostBuffer& b, size_t offset) {
  return reinterpret_cast<const T*>(static_cast<const char*>(b.data()) + offset);
}

}  // namespace

void DeviceScorer::Clear() {
  chunk_rows_.clear();
  chunk_tops_.clear();
  rows_.clear();
  targets_.clear();
  num_logit_rows_ = 0;
}

void DeviceScorer::AddChunk(int64_t first_row, const RunnerScoring& scoring) {
  chunk_rows_.push_back(scoring.targets.size());
  chunk_tops_.push_back(std::clamp(scoring.num_top, 0, kMaxScoreAlternatives));
  for (size_t i = 0; i < scoring.targets.size(); ++i) {
    rows_.push_back(static_cast<int32_t>(first_row + static_cast<int64_t>(i)));
    targets_.push_back(scoring.targets[i]);
  }
}

Status DeviceScorer::EnsureCapacity(size_t num_rows, size_t num_items, cuda::CachingAllocator& allocator) {
  if (num_rows <= row_capacity_ && num_items <= item_capacity_) return Status::Ok();
  row_capacity_ = std::max(num_rows, row_capacity_);
  item_capacity_ = std::max(num_items, item_capacity_);
  const InLayout in(row_capacity_, item_capacity_);
  const OutLayout out(row_capacity_, item_capacity_);
  PG_ASSIGN_OR_RETURN(in_h_, cuda::PinnedHostBuffer::Allocate(in.bytes));
  PG_ASSIGN_OR_RETURN(out_h_, cuda::PinnedHostBuffer::Allocate(out.bytes));
  PG_ASSIGN_OR_RETURN(in_d_, allocator.Allocate(in.bytes));
  PG_ASSIGN_OR_RETURN(out_d_, allocator.Allocate(out.bytes));
  return Status::Ok();
}

Status DeviceScorer::Enqueue(const Tensor& logits, cudaStream_t stream, cuda::CachingAllocator& allocator) {
  if (empty()) return Status::Ok();
  const int64_t vocab = logits.shape[1];
  const auto r = static_cast<size_t>(logits.shape[0]);
  const size_t n = rows_.size();
  num_logit_rows_ = r;
  for (size_t i = 0; i < n; ++i)
    if (rows_[i] < 0 || static_cast<size_t>(rows_[i]) >= r || targets_[i] < 0 || targets_[i] >= vocab)
      return Internal("a scored row outside the step's logits or vocabulary");
  // Every logits row gets a greedy row; scored rows report logprobs and force their target.
  batch_.Clear();
  batch_.rows.assign(r, DeviceSamplingRow{});
  batch_.edit_offsets.assign(r + 1, 0);
  std::vector<int32_t> tops(r, -1);
  std::vector<int32_t> target_of(r, -1);
  size_t item = 0;
  for (size_t c = 0; c < chunk_rows_.size(); ++c)
    for (size_t i = 0; i < chunk_rows_[c]; ++i, ++item) {
      tops[static_cast<size_t>(rows_[item])] = chunk_tops_[c];
      target_of[static_cast<size_t>(rows_[item])] = targets_[item];
    }
  for (size_t row = 0; row < r; ++row) {
    batch_.rows[row].num_top_logprobs = tops[row];
    if (target_of[row] >= 0)
      batch_.edits.push_back({target_of[row], static_cast<int32_t>(DeviceEditOp::kAdd), kForceTarget});
    batch_.edit_offsets[row + 1] = static_cast<int32_t>(batch_.edits.size());
  }
  if (batch_.edits.size() != n) return Internal("one scored row per logits row at most");
  PG_RETURN_IF_ERROR(EnsureCapacity(r, n, allocator));
  const InLayout in(r, n);
  const OutLayout out(r, n);
  char* h = static_cast<char*>(in_h_.data());
  std::memcpy(h + in.rows, batch_.rows.data(), r * sizeof(DeviceSamplingRow));
  std::memcpy(h + in.edits, batch_.edits.data(), n * sizeof(DeviceLogitEdit));
  std::memcpy(h + in.offsets, batch_.edit_offsets.data(), (r + 1) * 4);
  std::memcpy(h + in.items, rows_.data(), n * 4);
  std::memcpy(h + in.targets, targets_.data(), n * 4);
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in_d_.data(), in_h_.data(), in.bytes, cudaMemcpyHostToDevice, stream));

  const auto rr = static_cast<int64_t>(r), nn = static_cast<int64_t>(n);
  // Ranks first: the scoring pass edits the targets' logits.
  cuda::CountLogitsAboveArgs ranks;
  ranks.logits = logits;
  ranks.rows = View(in_d_, in.items, DType::kI32, {nn});
  ranks.tokens = View(in_d_, in.targets, DType::kI32, {nn});
  ranks.counts = View(out_d_, out.counts, DType::kI32, {nn});
  PG_RETURN_IF_ERROR(cuda::CountLogitsAbove(ranks, stream));

  cuda::SamplingArgs a;
  a.logits = logits;
  a.rows = View(in_d_, in.rows, DType::kU8, {rr, static_cast<int64_t>(sizeof(DeviceSamplingRow))});
  a.edit_offsets = View(in_d_, in.offsets, DType::kI32, {rr + 1});
  a.edits = View(in_d_, in.edits, DType::kU8, {nn, static_cast<int64_t>(sizeof(DeviceLogitEdit))});
  a.edit_raw = View(out_d_, out.edit_raw, DType::kF32, {nn});
  a.tokens = View(out_d_, out.tokens, DType::kI32, {rr});
  a.logprobs = View(out_d_, out.logprobs, DType::kF32, {rr});
  a.top_tokens = View(out_d_, out.top_tokens, DType::kI32, {rr, static_cast<int64_t>(kTop)});
  a.top_logprobs = View(out_d_, out.top_logprobs, DType::kF32, {rr, static_cast<int64_t>(kTop)});
  a.status = View(out_d_, out.status, DType::kI32, {rr});
  PG_RETURN_IF_ERROR(cuda::Sample(a, stream));
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out_h_.data(), out_d_.data(), out.bytes, cudaMemcpyDeviceToHost, stream));
  return Status::Ok();
}

Result<std::vector<ChunkScores>> DeviceScorer::Read() const {
  std::vector<ChunkScores> scores;
  if (empty()) return scores;
  const size_t r = num_logit_rows_, n = rows_.size();
  const OutLayout out(r, n);
  const int32_t* tokens = At<int32_t>(out_h_, out.tokens);
  const float* logprobs = At<float>(out_h_, out.logprobs);
  const int32_t* status = At<int32_t>(out_h_, out.status);
  const int32_t* top_tokens = At<int32_t>(out_h_, out.top_tokens);
  const float* top_logprobs = At<float>(out_h_, out.top_logprobs);
  const int32_t* counts = At<int32_t>(out_h_, out.counts);
  size_t item = 0;
  for (size_t c = 0; c < chunk_rows_.size(); ++c) {
    ChunkScores& chunk = scores.emplace_back();
    for (size_t i = 0; i < chunk_rows_[c]; ++i, ++item) {
      const auto row = static_cast<size_t>(rows_[item]);
      if (status[row] != kernels::kSamplingOk || counts[item] < 0) return Internal("the device could not score a prompt row");
      SampleResult s;
      s.token = targets_[item];
      // A target whose logit is -inf or NaN cannot be forced: its logprob is -inf.
      s.logprob = tokens[row] == s.token ? logprobs[row] : -std::numeric_limits<float>::infinity();
      s.rank = int64_t{counts[item]} + 1;
      for (int32_t k = 0; k < chunk_tops_[c]; ++k) {
        const size_t at = row * kTop + static_cast<size_t>(k);
        if (top_tokens[at] < 0) break;
        s.top_logprobs.push_back({top_tokens[at], top_logprobs[at]});
      }
      chunk.push_back(std::move(s));
    }
  }
  return scores;
}

}  // namespace peregrine
