#include "backend/cuda/ops/attention_args.h"

#include "kernels/common/kv_fp8_row.h"

namespace peregrine::cuda {

namespace {

// The optional staged-entry tensors of a launch over `batch` requests with rows of `width`
// elements of `dtype` (bf16 values, or the u8 bytes of FP8 rows).
Status CheckStaged(TensorChecker& check, const Tensor& data, const Tensor& first, const Tensor& table, Dim& batch,
                   DType dtype, Dim& width, kernels::StagedEntries* out) {
  *out = {};
  if (data.data == nullptr && first.data == nullptr && table.data == nullptr) return Status::Ok();
  Dim rows("R"), capacity("Ks");
  PG_RETURN_IF_ERROR(check.Check("staged rows", data, dtype, {&rows, &width}));
  PG_RETURN_IF_ERROR(check.Check("staged_first", first, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("staged_table", table, DType::kI32, {&batch, &capacity}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(
      check.Require(rows.value() <= INT32_MAX && capacity.value() <= INT32_MAX, "staged sizes overflow int32"));
  out->data = data.data;
  out->first = first.as<const int32_t>();
  out->table = table.as<const int32_t>();
  out->capacity = static_cast<int>(capacity.value());
  out->num_rows = static_cast<int>(rows.value());
  return Status::Ok();
}

}  // namespace

Status CheckAttentionTensors(TensorChecker& check, const SparseAttentionArgs& a, kernels::SparseAttentionParams* p) {
  Dim batch("B"), heads("H"), dim("D"), window_rows("Nw"), window_capacity("Kw");
  Dim pages("num_pages"), page_size("P"), max_pages("max_pages"), compressed_capacity("Kc"), tables("T");
  Dim num_positions("num_positions"), half("rope_dim/2", a.rope_dim / 2);
  PG_RETURN_IF_ERROR(check.Check("q", a.q, DType::kBF16, {&batch, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Check("window_kv", a.window_kv, DType::kBF16, {&window_rows, &dim}));
  PG_RETURN_IF_ERROR(check.Check("window_indices", a.window_indices, DType::kI32, {&batch, &window_capacity},
                                 Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("window_lengths", a.window_lengths, DType::kI32, {&batch}, Device::kCuda, 4));
  const bool has_compressed = a.compressed_kv.data != nullptr;
  const bool fp8 = has_compressed && a.compressed_kv.dtype == DType::kU8;
  Dim entry_width("entry_bytes");
  if (has_compressed) {
    // Entries in bf16, or (u8) as V4's FP8 rows of KvFp8RowLayout{D, entry_rope_dim}.row_bytes().
    if (fp8) {
      PG_RETURN_IF_ERROR(check.Require(a.entry_rope_dim >= 0 && a.entry_rope_dim % 8 == 0 &&
                                           a.entry_rope_dim <= dim.value() && (dim.value() - a.entry_rope_dim) % 8 == 0,
                                       "FP8 entries need their rope and e4m3 widths in multiples of 8"));
      entry_width.Bind(
          kernels::KvFp8RowLayout{static_cast<int>(dim.value()), static_cast<int>(a.entry_rope_dim)}.row_bytes());
    }
    PG_RETURN_IF_ERROR(check.Check("compressed_kv", a.compressed_kv, fp8 ? DType::kU8 : DType::kBF16,
                                   {&pages, &page_size, fp8 ? &entry_width : &dim}));
    if (a.page_table_rows.data == nullptr) tables.Bind(batch.value());
    PG_RETURN_IF_ERROR(check.Check("page_table", a.page_table, DType::kI32, {&tables, &max_pages}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(
        check.CheckOptional("page_table_rows", a.page_table_rows, DType::kI32, {&batch}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Require(tables.value() <= INT32_MAX, "page table rows overflow int32"));
    PG_RETURN_IF_ERROR(check.CheckOptional("compressed_indices", a.compressed_indices, DType::kI32,
                                           {&batch, &compressed_capacity}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(
        check.Check("compressed_lengths", a.compressed_lengths, DType::kI32, {&batch}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Require(page_size.value() > 0 && page_size.value() * max_pages.value() <= INT32_MAX,
                                     "page table too large for int32 entry numbers"));
    PG_RETURN_IF_ERROR(CheckStaged(check, a.staged_kv, a.staged_first, a.staged_table, batch,
                                   fp8 ? DType::kU8 : DType::kBF16, fp8 ? entry_width : dim, &p->staged));
  } else {
    PG_RETURN_IF_ERROR(check.Require(a.staged_kv.data == nullptr, "staged entries without compressed entries"));
    p->staged = {};
  }
  PG_RETURN_IF_ERROR(check.Check("sink", a.sink, DType::kF32, {&heads}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("positions", a.positions, DType::kI32, {&batch}, Device::kCuda, 4));
  const bool has_rope = a.rope_cos.data != nullptr;
  if (has_rope) {
    PG_RETURN_IF_ERROR(check.Require(a.rope_dim > 0 && a.rope_dim % 2 == 0 && a.rope_dim <= dim.value(),
                                     "rope_dim must be even, positive and at most D"));
    PG_RETURN_IF_ERROR(check.Check("rope_cos", a.rope_cos, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("rope_sin", a.rope_sin, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
  }
  PG_RETURN_IF_ERROR(check.Check("out", a.out, DType::kBF16, {&batch, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= INT32_MAX && window_capacity.value() <= INT32_MAX &&
                                       window_rows.value() <= INT32_MAX && num_positions.value() <= INT32_MAX &&
                                       (!has_compressed || compressed_capacity.value() <= INT32_MAX),
                                   "sizes overflow int32"));

  p->q = a.q.as<const __nv_bfloat16>();
  p->window_kv = a.window_kv.as<const __nv_bfloat16>();
  p->window_indices = a.window_indices.as<const int32_t>();
  p->window_lengths = a.window_lengths.as<const int32_t>();
  p->num_window_rows = window_rows.value();
  p->window_capacity = static_cast<int>(window_capacity.value());
  p->compressed_kv = has_compressed ? a.compressed_kv.data : nullptr;
  p->entries_fp8 = fp8;
  p->entry_rope_dim = fp8 ? static_cast<int>(a.entry_rope_dim) : 0;
  p->page_table = has_compressed ? a.page_table.as<const int32_t>() : nullptr;
  p->page_table_rows = has_compressed ? a.page_table_rows.as<const int32_t>() : nullptr;
  p->num_page_tables = has_compressed ? static_cast<int>(tables.value()) : 0;
  p->compressed_indices = has_compressed ? a.compressed_indices.as<const int32_t>() : nullptr;
  p->compressed_lengths = has_compressed ? a.compressed_lengths.as<const int32_t>() : nullptr;
  if (has_compressed) {
    p->num_compressed_rows = pages.value() * page_size.value();
    p->page_size = static_cast<int>(page_size.value());
    p->max_pages = static_cast<int>(max_pages.value());
    p->compressed_capacity = a.compressed_indices.data != nullptr ? static_cast<int>(compressed_capacity.value()) : 0;
  }
  p->sink = a.sink.as<const float>();
  p->positions = a.positions.as<const int32_t>();
  p->rope_cos = has_rope ? a.rope_cos.as<const float>() : nullptr;
  p->rope_sin = has_rope ? a.rope_sin.as<const float>() : nullptr;
  p->rope_dim = has_rope ? static_cast<int>(a.rope_dim) : 0;
  p->num_positions = has_rope ? static_cast<int>(num_positions.value()) : 0;
  p->out = a.out.as<__nv_bfloat16>();
  p->batch = static_cast<int>(batch.value());
  p->heads = static_cast<int>(heads.value());
  p->head_dim = static_cast<int>(dim.value());
  p->scale = a.scale;
  return Status::Ok();
}

Status CheckIndexerTensors(TensorChecker& check, const IndexerScoresArgs& a, int64_t q_alignment,
                           kernels::IndexerScoresParams* p) {
  Dim batch("B"), heads("IH"), dim("Id"), pages("pages"), page_size("P"), max_pages("max_pages"), stride("S");
  Dim tables("T");
  PG_RETURN_IF_ERROR(check.Check("q", a.q, DType::kBF16, {&batch, &heads, &dim}, Device::kCuda, q_alignment));
  PG_RETURN_IF_ERROR(check.Check("weights", a.weights, DType::kF32, {&batch, &heads}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("keys", a.keys, DType::kBF16, {&pages, &page_size, &dim}, Device::kCuda, q_alignment));
  if (a.page_table_rows.data == nullptr) tables.Bind(batch.value());
  PG_RETURN_IF_ERROR(check.Check("page_table", a.page_table, DType::kI32, {&tables, &max_pages}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.CheckOptional("page_table_rows", a.page_table_rows, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(tables.value() <= INT32_MAX, "page table rows overflow int32"));
  PG_RETURN_IF_ERROR(check.Check("num_entries", a.num_entries, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(
      CheckStaged(check, a.staged_keys, a.staged_first, a.staged_table, batch, DType::kBF16, dim, &p->staged));
  PG_RETURN_IF_ERROR(check.Check("scores", a.scores, DType::kF32, {&batch, &stride}, Device::kCuda, q_alignment));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= INT32_MAX && stride.value() <= INT32_MAX, "sizes overflow int32"));
  PG_RETURN_IF_ERROR(check.Require(page_size.value() > 0 && max_pages.value() <= INT32_MAX &&
                                       page_size.value() * max_pages.value() <= INT32_MAX,
                                   "page table too large for int32 entry numbers"));
  PG_RETURN_IF_ERROR(check.Require(a.num_ctas > 0 && a.num_ctas <= 65535, "num_ctas must be in [1, 65535]"));

  p->q = a.q.as<const __nv_bfloat16>();
  p->weights = a.weights.as<const float>();
  p->keys = a.keys.as<const __nv_bfloat16>();
  p->page_table = a.page_table.as<const int32_t>();
  p->page_table_rows = a.page_table_rows.as<const int32_t>();
  p->num_page_tables = static_cast<int>(tables.value());
  p->num_entries = a.num_entries.as<const int32_t>();
  p->scores = a.scores.as<float>();
  p->batch = static_cast<int>(batch.value());
  p->heads = static_cast<int>(heads.value());
  p->dim = static_cast<int>(dim.value());
  p->page_size = static_cast<int>(page_size.value());
  p->max_pages = static_cast<int>(max_pages.value());
  p->num_key_rows = pages.value() * page_size.value();
  p->score_stride = static_cast<int>(stride.value());
  p->scale = a.scale;
  p->num_ctas = a.num_ctas;
  return Status::Ok();
}

}  // namespace peregrine::cuda
