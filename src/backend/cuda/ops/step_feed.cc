#include "backend/cuda/ops/step_feed.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/step_feed.cuh"

namespace peregrine::cuda {

Status FeedTokens(const FeedTokensArgs& a, cudaStream_t stream) {
  TensorChecker check("feed_tokens");
  Dim rows("N"), pairs("n"), two("2", 2), sampled("S");
  PG_RETURN_IF_ERROR(check.Check("token_ids", a.token_ids, DType::kI32, {&rows}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("sampled", a.sampled, DType::kI32, {&sampled}, Device::kCuda, 4));
  if (a.feeds.data == nullptr) return Status::Ok();  // nothing fed this step
  PG_RETURN_IF_ERROR(check.Check("feeds", a.feeds, DType::kI32, {&pairs, &two}, Device::kCuda, 4));
  kernels::FeedTokensParams p;
  p.token_ids = a.token_ids.as<int32_t>();
  p.feeds = a.feeds.as<const int32_t>();
  p.sampled = a.sampled.as<const int32_t>();
  p.n = pairs.value();
  p.num_rows = rows.value();
  p.num_sampled = sampled.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchFeedTokens(p, stream));
  return Status::Ok();
}

Status CopyFlaggedRows(const CopyFlaggedRowsArgs& a, cudaStream_t stream) {
  TensorChecker check("copy_flagged_rows");
  Dim rows("R"), width("W");
  PG_RETURN_IF_ERROR(check.Check("src", a.src, DType::kF32, {&rows, &width}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("dst", a.dst, DType::kF32, {&rows, &width}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("flags", a.flags, DType::kI32, {&rows}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(rows.value() <= 65535, "at most 65535 rows"));
  kernels::CopyFlaggedRowsParams p;
  p.src = a.src.as<const float>();
  p.dst = a.dst.as<float>();
  p.flags = a.flags.as<const int32_t>();
  p.rows = rows.value();
  p.width = width.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchCopyFlaggedRows(p, stream));
  return Status::Ok();
}

Status CountLogitsAbove(const CountLogitsAboveArgs& a, cudaStream_t stream) {
  TensorChecker check("count_logits_above");
  Dim rows("R"), width("W"), n("n");
  PG_RETURN_IF_ERROR(check.Check("logits", a.logits, DType::kF32, {&rows, &width}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("rows", a.rows, DType::kI32, {&n}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("tokens", a.tokens, DType::kI32, {&n}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("counts", a.counts, DType::kI32, {&n}, Device::kCuda, 4));
  kernels::CountLogitsAboveParams p;
  p.logits = a.logits.as<const float>();
  p.rows = a.rows.as<const int32_t>();
  p.tokens = a.tokens.as<const int32_t>();
  p.counts = a.counts.as<int32_t>();
  p.n = n.value();
  p.num_rows = rows.value();
  p.width = width.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchCountLogitsAbove(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
