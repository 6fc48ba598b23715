#include "backend/cuda/ops/sparse_attention.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"

namespace peregrine::cuda {

Status PrepareSparseAttention() {
  PG_CUDA_RETURN_IF_ERROR(kernels::PrepareSparseAttention());
  return Status::Ok();
}

Status SparseAttentionDecode(const SparseAttentionArgs& a, cudaStream_t stream) {
  TensorChecker check("sparse_attention");
  const kernels::SparseAttentionScheduleLayout& layout = a.layout;
  Dim batch("B"), heads("H"), dim("D"), window_rows("Nw"), window_capacity("Kw");
  Dim pages("num_pages"), page_size("P"), max_pages("max_pages"), compressed_capacity("Kc");
  Dim num_positions("num_positions"), half("rope_dim/2", a.rope_dim / 2);
  Dim schedule_ints("schedule", layout.num_ints()), segments("max_segments", layout.max_segments);
  PG_RETURN_IF_ERROR(check.Check("q", a.q, DType::kBF16, {&batch, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Check("window_kv", a.window_kv, DType::kBF16, {&window_rows, &dim}));
  PG_RETURN_IF_ERROR(check.Check("window_indices", a.window_indices, DType::kI32, {&batch, &window_capacity},
                                 Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("window_lengths", a.window_lengths, DType::kI32, {&batch}, Device::kCuda, 4));
  const bool has_compressed = a.compressed_kv.data != nullptr;
  if (has_compressed) {
    PG_RETURN_IF_ERROR(check.Check("compressed_kv", a.compressed_kv, DType::kBF16, {&pages, &page_size, &dim}));
    PG_RETURN_IF_ERROR(check.Check("page_table", a.page_table, DType::kI32, {&batch, &max_pages}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.CheckOptional("compressed_indices", a.compressed_indices, DType::kI32,
                                           {&batch, &compressed_capacity}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(
        check.Check("compressed_lengths", a.compressed_lengths, DType::kI32, {&batch}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Require(page_size.value() > 0 && page_size.value() * max_pages.value() <= INT32_MAX,
                                     "page table too large for int32 entry numbers"));
  }
  PG_RETURN_IF_ERROR(check.Check("sink", a.sink, DType::kF32, {&heads}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("positions", a.positions, DType::kI32, {&batch}, Device::kCuda, 4));
  if (a.rope_cos.data != nullptr) {
    PG_RETURN_IF_ERROR(check.Require(a.rope_dim > 0 && a.rope_dim % 2 == 0 && a.rope_dim <= dim.value(),
                                     "rope_dim must be even, positive and at most D"));
    PG_RETURN_IF_ERROR(check.Check("rope_cos", a.rope_cos, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("rope_sin", a.rope_sin, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
  }
  PG_RETURN_IF_ERROR(check.Check("schedule", a.schedule, DType::kI32, {&schedule_ints}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("partial_o", a.partial_o, DType::kF32, {&segments, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Check("partial_lse", a.partial_lse, DType::kF32, {&segments, &heads}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("out", a.out, DType::kBF16, {&batch, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Require(kernels::SparseAttentionSharedBytes(static_cast<int>(heads.value()),
                                                                       static_cast<int>(dim.value())) > 0,
                                   "(H, D) = (" + std::to_string(heads.value()) + ", " + std::to_string(dim.value()) +
                                       ") is not built (see kSparseAttentionConfigs)"));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= layout.max_batch, "B exceeds the schedule's max_batch"));
  PG_RETURN_IF_ERROR(check.Require(layout.num_ctas >= 1 && layout.max_segments >= layout.num_ctas + layout.max_batch,
                                   "malformed schedule layout"));
  PG_RETURN_IF_ERROR(check.Require(window_capacity.value() <= INT32_MAX && num_positions.value() <= INT32_MAX &&
                                       (!has_compressed || compressed_capacity.value() <= INT32_MAX),
                                   "sizes overflow int32"));

  kernels::SparseAttentionParams p;
  p.q = a.q.as<const __nv_bfloat16>();
  p.window_kv = a.window_kv.as<const __nv_bfloat16>();
  p.window_indices = a.window_indices.as<const int32_t>();
  p.window_lengths = a.window_lengths.as<const int32_t>();
  p.num_window_rows = window_rows.value();
  p.window_capacity = static_cast<int>(window_capacity.value());
  if (has_compressed) {
    p.compressed_kv = a.compressed_kv.as<const __nv_bfloat16>();
    p.page_table = a.page_table.as<const int32_t>();
    p.compressed_indices = a.compressed_indices.as<const int32_t>();
    p.compressed_lengths = a.compressed_lengths.as<const int32_t>();
    p.num_compressed_rows = pages.value() * page_size.value();
    p.page_size = static_cast<int>(page_size.value());
    p.max_pages = static_cast<int>(max_pages.value());
    p.compressed_capacity = a.compressed_indices.data != nullptr ? static_cast<int>(compressed_capacity.value()) : 0;
  } else {
    p.compressed_kv = nullptr;
    p.page_table = nullptr;
    p.compressed_indices = nullptr;
    p.compressed_lengths = nullptr;
  }
  p.sink = a.sink.as<const float>();
  p.positions = a.positions.as<const int32_t>();
  p.rope_cos = a.rope_cos.as<const float>();
  p.rope_sin = a.rope_sin.as<const float>();
  p.rope_dim = a.rope_cos.data != nullptr ? static_cast<int>(a.rope_dim) : 0;
  p.num_positions = a.rope_cos.data != nullptr ? static_cast<int>(num_positions.value()) : 0;
  p.schedule = a.schedule.as<const int32_t>();
  p.partial_o = a.partial_o.as<float>();
  p.partial_lse = a.partial_lse.as<float>();
  p.out = a.out.as<__nv_bfloat16>();
  p.batch = static_cast<int>(batch.value());
  p.heads = static_cast<int>(heads.value());
  p.head_dim = static_cast<int>(dim.value());
  p.scale = a.scale;
  p.layout = layout;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchSparseAttention(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
