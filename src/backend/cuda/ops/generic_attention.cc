#include "backend/cuda/ops/generic_attention.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/generic_attention.cuh"

namespace peregrine::cuda {

Status SparseAttentionGeneric(const SparseAttentionArgs& a, cudaStream_t stream) {
  TensorChecker check("sparse_attention_generic");
  Dim batch("B"), heads("H"), dim("D"), window_rows("Nw"), window_capacity("Kw");
  Dim pages("num_pages"), page_size("P"), max_pages("max_pages"), compressed_capacity("Kc");
  Dim num_positions("num_positions"), half("rope_dim/2", a.rope_dim / 2);
  // bf16 rows are read with 16-byte loads when D % 8 == 0: bases stay 16-byte aligned.
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
  PG_RETURN_IF_ERROR(check.Check("out", a.out, DType::kBF16, {&batch, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Require(dim.value() >= 2 && dim.value() % 2 == 0 &&
                                       dim.value() <= kernels::kGenericAttentionMaxDim,
                                   "D must be even and in [2, " + std::to_string(kernels::kGenericAttentionMaxDim) +
                                       "], got " + std::to_string(dim.value())));
  PG_RETURN_IF_ERROR(check.Require(heads.value() >= 1 && heads.value() <= 65535, "H must be in [1, 65535]"));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= INT32_MAX && window_capacity.value() <= INT32_MAX &&
                                       window_rows.value() <= INT32_MAX && num_positions.value() <= INT32_MAX &&
                                       (!has_compressed || compressed_capacity.value() <= INT32_MAX),
                                   "sizes overflow int32"));

  kernels::SparseAttentionParams p{};
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
  }
  p.sink = a.sink.as<const float>();
  p.positions = a.positions.as<const int32_t>();
  const bool has_rope = a.rope_cos.data != nullptr;
  p.rope_cos = has_rope ? a.rope_cos.as<const float>() : nullptr;
  p.rope_sin = has_rope ? a.rope_sin.as<const float>() : nullptr;
  p.rope_dim = has_rope ? static_cast<int>(a.rope_dim) : 0;
  p.num_positions = has_rope ? static_cast<int>(num_positions.value()) : 0;
  p.out = a.out.as<__nv_bfloat16>();
  p.batch = static_cast<int>(batch.value());
  p.heads = static_cast<int>(heads.value());
  p.head_dim = static_cast<int>(dim.value());
  p.scale = a.scale;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchSparseAttentionGeneric(p, stream));
  return Status::Ok();
}

Status IndexerScoresGeneric(const IndexerScoresArgs& a, cudaStream_t stream) {
  TensorChecker check("indexer_scores_generic");
  Dim batch("B"), heads("IH"), dim("Id"), pages("pages"), page_size("P"), max_pages("max_pages"), stride("S");
  PG_RETURN_IF_ERROR(check.Check("q", a.q, DType::kBF16, {&batch, &heads, &dim}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("weights", a.weights, DType::kF32, {&batch, &heads}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("keys", a.keys, DType::kBF16, {&pages, &page_size, &dim}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("page_table", a.page_table, DType::kI32, {&batch, &max_pages}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("num_entries", a.num_entries, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("scores", a.scores, DType::kF32, {&batch, &stride}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(heads.value() >= 1 && dim.value() >= 2 && dim.value() % 2 == 0,
                                   "IH must be positive and Id even"));
  PG_RETURN_IF_ERROR(check.Require(
      kernels::GenericIndexerSharedBytes(heads.value(), dim.value()) <= kernels::kGenericIndexerMaxSharedBytes,
      "(IH, Id) = (" + std::to_string(heads.value()) + ", " + std::to_string(dim.value()) +
          ") needs more shared memory than the generic indexer has"));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= INT32_MAX && stride.value() <= INT32_MAX, "sizes overflow int32"));
  PG_RETURN_IF_ERROR(check.Require(page_size.value() > 0 && max_pages.value() <= INT32_MAX &&
                                       page_size.value() * max_pages.value() <= INT32_MAX,
                                   "page table too large for int32 entry numbers"));
  PG_RETURN_IF_ERROR(check.Require(a.num_ctas > 0 && a.num_ctas <= 65535, "num_ctas must be in [1, 65535]"));

  kernels::IndexerScoresParams p{};
  p.q = a.q.as<const __nv_bfloat16>();
  p.weights = a.weights.as<const float>();
  p.keys = a.keys.as<const __nv_bfloat16>();
  p.page_table = a.page_table.as<const int32_t>();
  p.num_entries = a.num_entries.as<const int32_t>();
  p.scores = a.scores.as<float>();
  p.batch = static_cast<int>(batch.value());
  p.heads = static_cast<int>(heads.value());
  p.dim = static_cast<int>(dim.value());
  p.page_size = static_cast<int>(page_size.value());
  p.max_pages = static_cast<int>(max_pages.value());
  p.num_key_rows = pages.value() * page_size.value();
  p.score_stride = static_cast<int>(stride.value());
  p.scale = a.scale;
  p.num_ctas = a.num_ctas;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchIndexerScoresGeneric(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
