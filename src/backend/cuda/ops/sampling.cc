#include "backend/cuda/ops/sampling.h"

#include <cstddef>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/draft_candidates.cuh"
#include "kernels/sampling.cuh"
#include "sampling/device_rows.h"

namespace peregrine::cuda {
namespace {

// The host builds rows and edits without CUDA headers: the two layouts must agree.
using kernels::SamplingEdit;
using kernels::SamplingRow;
static_assert(sizeof(SamplingRow) == 32 && sizeof(DeviceSamplingRow) == sizeof(SamplingRow));
static_assert(offsetof(SamplingRow, temperature) == offsetof(DeviceSamplingRow, temperature) &&
              offsetof(SamplingRow, inv_temperature) == offsetof(DeviceSamplingRow, inv_temperature) &&
              offsetof(SamplingRow, top_k) == offsetof(DeviceSamplingRow, top_k) &&
              offsetof(SamplingRow, top_p) == offsetof(DeviceSamplingRow, top_p) &&
              offsetof(SamplingRow, min_p) == offsetof(DeviceSamplingRow, min_p) &&
              offsetof(SamplingRow, num_top_logprobs) == offsetof(DeviceSamplingRow, num_top_logprobs) &&
              offsetof(SamplingRow, u) == offsetof(DeviceSamplingRow, u));
static_assert(sizeof(SamplingEdit) == 16 && sizeof(DeviceLogitEdit) == sizeof(SamplingEdit));
static_assert(offsetof(SamplingEdit, token) == offsetof(DeviceLogitEdit, token) &&
              offsetof(SamplingEdit, op) == offsetof(DeviceLogitEdit, op) &&
              offsetof(SamplingEdit, value) == offsetof(DeviceLogitEdit, value));
static_assert(static_cast<int>(kernels::SamplingEditOp::kAdd) == static_cast<int>(DeviceEditOp::kAdd) &&
              static_cast<int>(kernels::SamplingEditOp::kRepetition) == static_cast<int>(DeviceEditOp::kRepetition) &&
              static_cast<int>(kernels::SamplingEditOp::kSubtract) == static_cast<int>(DeviceEditOp::kSubtract));
static_assert(kernels::kSamplingMaxTopLogprobs == kMaxTopLogprobs);

}  // namespace

Status Sample(const SamplingArgs& a, cudaStream_t stream) {
  TensorChecker check("sampling");
  Dim batch("B"), vocab("V"), edits("E"), row_bytes("R", sizeof(SamplingRow)), edit_bytes("S", sizeof(SamplingEdit));
  Dim top("N", kernels::kSamplingMaxTopLogprobs);
  PG_RETURN_IF_ERROR(check.Check("logits", a.logits, DType::kF32, {&batch, &vocab}));
  PG_RETURN_IF_ERROR(check.Check("rows", a.rows, DType::kU8, {&batch, &row_bytes}));
  Dim offsets("B+1", batch.value() + 1);
  PG_RETURN_IF_ERROR(check.Check("edit_offsets", a.edit_offsets, DType::kI32, {&offsets}));
  PG_RETURN_IF_ERROR(check.CheckOptional("edits", a.edits, DType::kU8, {&edits, &edit_bytes}));
  if (a.edits.data == nullptr) edits.Bind(0);
  PG_RETURN_IF_ERROR(check.CheckOptional("edit_raw", a.edit_raw, DType::kF32, {&edits}));
  PG_RETURN_IF_ERROR(check.Require(edits.value() == 0 || a.edit_raw.data != nullptr, "edit_raw is needed with edits"));
  PG_RETURN_IF_ERROR(check.Check("tokens", a.tokens, DType::kI32, {&batch}));
  PG_RETURN_IF_ERROR(check.Check("logprobs", a.logprobs, DType::kF32, {&batch}));
  PG_RETURN_IF_ERROR(check.Check("top_tokens", a.top_tokens, DType::kI32, {&batch, &top}));
  PG_RETURN_IF_ERROR(check.Check("top_logprobs", a.top_logprobs, DType::kF32, {&batch, &top}));
  PG_RETURN_IF_ERROR(check.Check("status", a.status, DType::kI32, {&batch}));
  Dim phases("P", kernels::kSamplingPhases);
  PG_RETURN_IF_ERROR(check.CheckOptional("phase_stamps", a.phase_stamps, DType::kI64, {&batch, &phases}));
  PG_RETURN_IF_ERROR(check.Require(vocab.value() >= 1 && vocab.value() <= kernels::kSamplingMaxVocab,
                                   "V must be in [1, 2^18]"));
  PG_RETURN_IF_ERROR(check.Require(edits.value() < (int64_t{1} << 31), "E must be below 2^31"));

  kernels::SamplingKernelParams p;
  p.logits = a.logits.as<float>();
  p.rows = a.rows.as<const SamplingRow>();
  p.edit_offsets = a.edit_offsets.as<const int32_t>();
  p.edits = a.edits.as<const SamplingEdit>();
  p.edit_raw = a.edit_raw.as<float>();
  p.tokens = a.tokens.as<int32_t>();
  p.logprobs = a.logprobs.as<float>();
  p.top_tokens = a.top_tokens.as<int32_t>();
  p.top_logprobs = a.top_logprobs.as<float>();
  p.status = a.status.as<int32_t>();
  p.phase_stamps = a.phase_stamps.as<int64_t>();
  p.batch = batch.value();
  p.vocab = static_cast<int32_t>(vocab.value());
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchSampling(p, stream));
  return Status::Ok();
}

Status DraftCandidates(const DraftCandidatesArgs& a, cudaStream_t stream) {
  TensorChecker check("draft_candidates");
  Dim batch("B"), vocab("V"), width("W");
  PG_RETURN_IF_ERROR(check.Check("logits", a.logits, DType::kF32, {&batch, &vocab}));
  PG_RETURN_IF_ERROR(check.CheckOptional("bias", a.bias, DType::kF32, {&batch, &vocab}));
  PG_RETURN_IF_ERROR(check.Check("tokens", a.tokens, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.CheckOptional("top_tokens", a.top_tokens, DType::kI32, {&batch, &width}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.CheckOptional("top_logprobs", a.top_logprobs, DType::kF32, {&batch, &width}, Device::kCuda, 4));
  const bool top = a.top_tokens.data != nullptr;
  PG_RETURN_IF_ERROR(check.Require(top == (a.top_logprobs.data != nullptr), "top_tokens and top_logprobs together"));
  PG_RETURN_IF_ERROR(check.Require(a.k >= 1 && a.k <= kernels::kDraftMaxCandidates, "k must be in [1, 16]"));
  PG_RETURN_IF_ERROR(check.Require(!top || (a.column >= 0 && a.column + a.k <= width.value()),
                                   "the k columns must lie inside W"));
  PG_RETURN_IF_ERROR(check.Require(vocab.value() < (int64_t{1} << 31), "V must be below 2^31"));
  kernels::DraftCandidatesParams p;
  p.logits = a.logits.as<const float>();
  p.bias = a.bias.data != nullptr ? a.bias.as<const float>() : nullptr;
  p.tokens = a.tokens.as<int32_t>();
  p.top_tokens = top ? a.top_tokens.as<int32_t>() + a.column : nullptr;
  p.top_logprobs = top ? a.top_logprobs.as<float>() + a.column : nullptr;
  p.top_pitch = top ? width.value() : 0;
  p.batch = batch.value();
  p.vocab = static_cast<int32_t>(vocab.value());
  p.k = static_cast<int32_t>(a.k);
  p.one_cta_per_row = a.one_cta_per_row;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchDraftCandidates(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
