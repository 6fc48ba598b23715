#include "runtime/cuda_model_runner.h"

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/sampling.h"
#include "kernels/sampling.cuh"

namespace peregrine {

CudaModelRunner::CudaModelRunner(std::unique_ptr<deepseek_v4::cuda::CudaModel> model, bool device_sampling)
    : model_(std::move(model)),
      device_sampling_(device_sampling),
      slot_positions_(static_cast<size_t>(model_->options().num_slots), -1) {}

std::vector<int32_t> CudaModelRunner::eos_token_ids() const {
  std::vector<int32_t> ids;
  for (int64_t id : model_->config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

void CudaModelRunner::Release(int64_t) {
  // Slots are the engine's: a released sequence's slot is restarted (position 0) by its next
  // owner, which overwrites the state as it goes.
}

Status CudaModelRunner::PlanChunks(std::span<const RunnerChunk> chunks) {
  step_.clear();
  for (const RunnerChunk& chunk : chunks) {
    if (chunk.slot < 0 || chunk.slot >= static_cast<int32_t>(slot_positions_.size()))
      return Internal("KV slot " + std::to_string(chunk.slot) + " outside the device state");
    const int64_t at = slot_positions_[static_cast<size_t>(chunk.slot)];
    if (chunk.first_position != 0 && chunk.first_position != at)
      return Internal("runner state out of step for sequence " + std::to_string(chunk.seq_id));
    step_.push_back({chunk.slot, chunk.first_position, chunk.tokens, chunk.needs_logits});
  }
  return Status::Ok();
}

void CudaModelRunner::Advance(std::span<const RunnerChunk> chunks, const Status& status) {
  for (const RunnerChunk& chunk : chunks)
    slot_positions_[static_cast<size_t>(chunk.slot)] =
        status.ok() ? chunk.first_position + static_cast<int64_t>(chunk.tokens.size()) : -1;
}

Status CudaModelRunner::Run(std::span<const RunnerChunk> chunks, std::vector<float>* logits) {
  PG_RETURN_IF_ERROR(PlanChunks(chunks));
  const Status s = model_->Forward(step_, logits);
  Advance(chunks, s);
  return s;
}

Status CudaModelRunner::EnsureSamplingBuffers(size_t rows, size_t edits) {
  peregrine::cuda::CachingAllocator& a = model_->allocator();
  if (rows > row_capacity_) {
    const size_t n = std::max<size_t>(rows, 2 * row_capacity_);
    PG_ASSIGN_OR_RETURN(rows_d_, a.Allocate(n * sizeof(DeviceSamplingRow)));
    PG_ASSIGN_OR_RETURN(offsets_d_, a.Allocate((n + 1) * 4));
    PG_ASSIGN_OR_RETURN(tokens_d_, a.Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(logprobs_d_, a.Allocate(n * 4));
    PG_ASSIGN_OR_RETURN(top_tokens_d_, a.Allocate(n * kernels::kSamplingMaxTopLogprobs * 4));
    PG_ASSIGN_OR_RETURN(top_logprobs_d_, a.Allocate(n * kernels::kSamplingMaxTopLogprobs * 4));
    PG_ASSIGN_OR_RETURN(status_d_, a.Allocate(n * 4));
    row_capacity_ = n;
  }
  if (edits > edit_capacity_) {
    const size_t n = std::max<size_t>(edits, 2 * edit_capacity_);
    PG_ASSIGN_OR_RETURN(edits_d_, a.Allocate(n * sizeof(DeviceLogitEdit)));
    PG_ASSIGN_OR_RETURN(edit_raw_d_, a.Allocate(n * 4));
    edit_capacity_ = n;
  }
  return Status::Ok();
}

Status CudaModelRunner::RunAndSample(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling,
                                     std::vector<SampleResult>* results) {
  PG_RETURN_IF_ERROR(PlanChunks(chunks));
  const int64_t vocab = model_->config().vocab_size;
  batch_.Clear();
  rng_before_.resize(sampling.size());
  for (size_t i = 0; i < sampling.size(); ++i)
    AppendDeviceRow(*sampling[i].params, *sampling[i].state, vocab, batch_, &rng_before_[i]);
  const size_t r = batch_.num_rows();
  const size_t e = batch_.edits.size();
  PG_RETURN_IF_ERROR(EnsureSamplingBuffers(std::max<size_t>(r, 1), e));
  const int64_t rr = static_cast<int64_t>(r);
  const int64_t ee = static_cast<int64_t>(e);
  tokens_.resize(r);
  logprobs_.resize(r);
  status_.resize(r);
  top_tokens_.resize(r * kernels::kSamplingMaxTopLogprobs);
  top_logprobs_.resize(top_tokens_.size());
  edit_raw_.resize(e);
  Tensor device_logits;
  auto sample = [&](const Tensor& logits, cudaStream_t stream) -> Status {
    device_logits = logits;
    if (r == 0) return Status::Ok();
    auto dev = [](const peregrine::cuda::DeviceBuffer& b, DType t, Shape s) {
      return Tensor::Contiguous(b.data(), t, s, Device::kCuda);
    };
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rows_d_.data(), batch_.rows.data(), r * sizeof(DeviceSamplingRow),
                                            cudaMemcpyHostToDevice, stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(offsets_d_.data(), batch_.edit_offsets.data(), (r + 1) * 4,
                                            cudaMemcpyHostToDevice, stream));
    if (e > 0)
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(edits_d_.data(), batch_.edits.data(), e * sizeof(DeviceLogitEdit),
                                              cudaMemcpyHostToDevice, stream));
    peregrine::cuda::SamplingArgs a;
    a.logits = logits;
    a.rows = dev(rows_d_, DType::kU8, {rr, static_cast<int64_t>(sizeof(DeviceSamplingRow))});
    a.edit_offsets = dev(offsets_d_, DType::kI32, {rr + 1});
    if (e > 0) {
      a.edits = dev(edits_d_, DType::kU8, {ee, static_cast<int64_t>(sizeof(DeviceLogitEdit))});
      a.edit_raw = dev(edit_raw_d_, DType::kF32, {ee});
    }
    a.tokens = dev(tokens_d_, DType::kI32, {rr});
    a.logprobs = dev(logprobs_d_, DType::kF32, {rr});
    a.top_tokens = dev(top_tokens_d_, DType::kI32, {rr, kernels::kSamplingMaxTopLogprobs});
    a.top_logprobs = dev(top_logprobs_d_, DType::kF32, {rr, kernels::kSamplingMaxTopLogprobs});
    a.status = dev(status_d_, DType::kI32, {rr});
    PG_RETURN_IF_ERROR(peregrine::cuda::Sample(a, stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens_.data(), tokens_d_.data(), r * 4, cudaMemcpyDeviceToHost, stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logprobs_.data(), logprobs_d_.data(), r * 4, cudaMemcpyDeviceToHost, stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(status_.data(), status_d_.data(), r * 4, cudaMemcpyDeviceToHost, stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(top_tokens_.data(), top_tokens_d_.data(), top_tokens_.size() * 4,
                                            cudaMemcpyDeviceToHost, stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(top_logprobs_.data(), top_logprobs_d_.data(), top_logprobs_.size() * 4,
                                            cudaMemcpyDeviceToHost, stream));
    if (e > 0)
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(edit_raw_.data(), edit_raw_d_.data(), e * 4, cudaMemcpyDeviceToHost,
                                              stream));
    return Status::Ok();
  };
  const Status s = model_->Forward(step_, nullptr, sample);
  Advance(chunks, s);
  PG_RETURN_IF_ERROR(s);

  results->clear();
  std::vector<float> row_logits;
  for (size_t i = 0; i < r; ++i) {
    const SamplingParams& params = *sampling[i].params;
    SequenceSamplingState& state = *sampling[i].state;
    if (status_[i] != kernels::kSamplingOk) {
      // The device gave this row up (too many candidates): finish it on the host from the
      // device's edited row, with the RNG as it was before this step's draw.
      row_logits.resize(static_cast<size_t>(vocab));
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(row_logits.data(), device_logits.as<float>() + i * static_cast<size_t>(vocab),
                                         row_logits.size() * 4, cudaMemcpyDeviceToHost));
      const auto begin = static_cast<size_t>(batch_.edit_offsets[i]);
      const auto end = static_cast<size_t>(batch_.edit_offsets[i + 1]);
      results->push_back(SampleOverflowRow(row_logits, std::span(batch_.edits).subspan(begin, end - begin),
                                           std::span<const float>(edit_raw_).subspan(begin, end - begin), params,
                                           state, rng_before_[i]));
      continue;
    }
    SampleResult out;
    out.token = tokens_[i];
    if (params.logprobs >= 0) {
      out.logprob = logprobs_[i];
      for (int32_t k = 0; k < std::min(params.logprobs, kernels::kSamplingMaxTopLogprobs); ++k) {
        const size_t at = i * kernels::kSamplingMaxTopLogprobs + static_cast<size_t>(k);
        if (top_tokens_[at] < 0) break;
        out.top_logprobs.push_back({top_tokens_[at], top_logprobs_[at]});
      }
    }
    state.Append(out.token);
    results->push_back(std::move(out));
  }
  return Status::Ok();
}

}  // namespace peregrine
