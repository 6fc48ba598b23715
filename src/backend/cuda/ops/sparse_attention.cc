#include "backend/cuda/ops/sparse_attention.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/attention_args.h"
#include "backend/cuda/ops/tensor_check.h"

namespace peregrine::cuda {

Status PrepareSparseAttention() {
  PG_CUDA_RETURN_IF_ERROR(kernels::PrepareSparseAttention());
  return Status::Ok();
}

Status SparseAttentionDecode(const SparseAttentionArgs& a, cudaStream_t stream) {
  TensorChecker check("sparse_attention");
  kernels::SparseAttentionParams p;
  PG_RETURN_IF_ERROR(CheckAttentionTensors(check, a, &p));
  const kernels::SparseAttentionScheduleLayout& layout = a.layout;
  Dim heads("H", p.heads), dim("D", p.head_dim);
  Dim schedule_ints("schedule", layout.num_ints()), segments("max_segments", layout.max_segments);
  PG_RETURN_IF_ERROR(check.Check("schedule", a.schedule, DType::kI32, {&schedule_ints}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("partial_o", a.partial_o, DType::kF32, {&segments, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Check("partial_lse", a.partial_lse, DType::kF32, {&segments, &heads}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(kernels::SparseAttentionSharedBytes(p.heads, p.head_dim) > 0,
                                   "(H, D) = (" + std::to_string(p.heads) + ", " + std::to_string(p.head_dim) +
                                       ") is not built (see kSparseAttentionConfigs)"));
  PG_RETURN_IF_ERROR(check.Require(p.batch <= layout.max_batch, "B exceeds the schedule's max_batch"));
  PG_RETURN_IF_ERROR(check.Require(layout.num_ctas >= 1 && layout.max_segments >= layout.num_ctas + layout.max_batch,
                                   "malformed schedule layout"));
  p.schedule = a.schedule.as<const int32_t>();
  p.partial_o = a.partial_o.as<float>();
  p.partial_lse = a.partial_lse.as<float>();
  p.layout = layout;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchSparseAttention(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
