#include "backend/cuda/ops/token_bitmask.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/token_bitmask.cuh"

namespace peregrine::cuda {

Status ApplyTokenBitmask(const TokenBitmaskArgs& a, cudaStream_t stream) {
  TensorChecker check("apply_token_bitmask");
  Dim rows("R"), vocab("V"), masks("M"), words("W");
  PG_RETURN_IF_ERROR(check.Check("logits", a.logits, DType::kF32, {&rows, &vocab}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("masks", a.masks, DType::kI32, {&masks, &words}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("row_mask", a.row_mask, DType::kI32, {&rows}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(words.value() * 32 >= vocab.value(), "a mask word per 32 vocabulary ids"));
  PG_RETURN_IF_ERROR(check.Require(rows.value() <= 65535, "at most 65535 rows"));
  kernels::TokenBitmaskParams p;
  p.logits = a.logits.as<float>();
  p.masks = static_cast<const uint32_t*>(a.masks.data);
  p.row_mask = a.row_mask.as<const int32_t>();
  p.rows = rows.value();
  p.vocab = vocab.value();
  p.words = words.value();
  p.num_masks = masks.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchApplyTokenBitmask(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
