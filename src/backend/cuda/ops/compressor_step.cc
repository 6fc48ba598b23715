#include "backend/cuda/ops/compressor_step.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/element_type.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/common/kv_fp8_row.h"
#include "kernels/compressor_step.cuh"

namespace peregrine::cuda {

Status CompressorStep(const CompressorStepArgs& a, cudaStream_t stream) {
  TensorChecker check("compressor_step");
  PG_RETURN_IF_ERROR(check.Require(a.coff == 1 || a.coff == 2, "coff must be 1 or 2"));
  PG_RETURN_IF_ERROR(check.Require(a.ratio >= 1 && a.ratio <= 4096, "ratio must be in [1, 4096]"));
  const bool has_offsets = a.token_offsets.data != nullptr;
  Dim batch("B"), tokens("N"), dim("Dc"), width("coff*Dc");
  Dim ratio("ratio", a.ratio), rows("coff*ratio", a.coff * a.ratio);
  Dim slots("S"), num_positions("num_positions"), half("rope_dim/2", a.rope_dim / 2);
  Dim pages("pages"), page_size("P"), max_pages("max_pages");
  const auto input_type = ToElementType(a.kv.dtype);
  PG_RETURN_IF_ERROR(check.Require(input_type.has_value(), "kv must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Check("norm_weight", a.norm_weight, DType::kF32, {&dim}));
  width.Bind(a.coff * dim.value());
  PG_RETURN_IF_ERROR(check.Check("state_slots", a.state_slots, DType::kI32, {&batch}, Device::kCuda, 4));
  Dim* rows_in = has_offsets ? &tokens : &batch;  // without offsets, row b is request b's token
  PG_RETURN_IF_ERROR(check.Check("kv", a.kv, a.kv.dtype, {rows_in, &width}));
  PG_RETURN_IF_ERROR(check.Check("gate", a.gate, a.kv.dtype, {rows_in, &width}));
  if (has_offsets) {
    Dim offsets("B+1", batch.value() + 1);
    PG_RETURN_IF_ERROR(check.Check("token_offsets", a.token_offsets, DType::kI32, {&offsets}, Device::kCuda, 4));
  }
  PG_RETURN_IF_ERROR(check.Check("ape", a.ape, DType::kF32, {&ratio, &width}));
  PG_RETURN_IF_ERROR(check.Check("kv_state", a.kv_state, DType::kF32, {&slots, &rows, &width}));
  PG_RETURN_IF_ERROR(check.Check("gate_state", a.gate_state, DType::kF32, {&slots, &rows, &width}));
  PG_RETURN_IF_ERROR(check.Check("positions", a.positions, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("rope_cos", a.rope_cos, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("rope_sin", a.rope_sin, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
  // Entries in bf16, or (u8 rows) as V4's FP8 rows of KvFp8RowLayout{Dc, rope_dim}.row_bytes().
  const bool fp8 = a.cache.dtype == DType::kU8;
  Dim entry_width("entry_bytes");
  if (fp8 && a.rope_dim >= 0 && a.rope_dim <= dim.value() && dim.value() <= kernels::kCompressorMaxDim)
    entry_width.Bind(kernels::KvFp8RowLayout{static_cast<int>(dim.value()), static_cast<int>(a.rope_dim)}.row_bytes());
  Dim* entry_dim = fp8 ? &entry_width : &dim;
  PG_RETURN_IF_ERROR(check.Check("cache", a.cache, fp8 ? DType::kU8 : DType::kBF16, {&pages, &page_size, entry_dim}));
  Dim tables("T");
  const bool has_rows = a.page_table_rows.data != nullptr;
  if (!has_rows) tables.Bind(batch.value());
  PG_RETURN_IF_ERROR(check.Check("page_table", a.page_table, DType::kI32, {&tables, &max_pages}, Device::kCuda, 4));
  if (has_rows)
    PG_RETURN_IF_ERROR(check.Check("page_table_rows", a.page_table_rows, DType::kI32, {&batch}, Device::kCuda, 4));
  const bool has_snapshots = a.snapshot_table.data != nullptr;
  Dim max_snapshots("max_snapshots");
  if (has_snapshots) {
    PG_RETURN_IF_ERROR(
        check.Check("snapshot_table", a.snapshot_table, DType::kI32, {&batch, &max_snapshots}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Require(a.snapshot_kv != nullptr && a.snapshot_gate != nullptr && a.num_snapshots >= 0 &&
                                         a.snapshot_stride >= a.ratio * width.value() &&
                                         a.snapshot_interval > 0 && a.snapshot_interval % a.ratio == 0 &&
                                         a.snapshot_interval <= INT32_MAX && a.num_snapshots <= INT32_MAX,
                                     "snapshots need records of ratio x coff*Dc floats, a count and an interval that "
                                     "is a multiple of the ratio"));
  }
  const bool has_trees = a.tree_rows.data != nullptr;
  Dim path_capacity("L"), stage_rows("num_stage_rows");
  if (has_trees) {
    PG_RETURN_IF_ERROR(check.Require(has_offsets, "tree nodes need token_offsets"));
    PG_RETURN_IF_ERROR(check.Check("tree_rows", a.tree_rows, DType::kI32, {&tokens}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("tree_paths", a.tree_paths, DType::kI32, {&tokens, &path_capacity}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("tree_slots", a.tree_slots, DType::kI32, {&tokens}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("tree_positions", a.tree_positions, DType::kI32, {&tokens}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("stage_kv", a.stage_kv, DType::kF32, {&stage_rows, &width}));
    PG_RETURN_IF_ERROR(check.Check("stage_gate", a.stage_gate, DType::kF32, {&stage_rows, &width}));
    PG_RETURN_IF_ERROR(
        check.Check("stage_entries", a.stage_entries, fp8 ? DType::kU8 : DType::kBF16, {&stage_rows, entry_dim}));
    PG_RETURN_IF_ERROR(check.Require(path_capacity.value() <= INT32_MAX && stage_rows.value() <= INT32_MAX,
                                     "tree sizes overflow int32"));
  }
  PG_RETURN_IF_ERROR(check.Require(dim.value() >= 1 && dim.value() <= kernels::kCompressorMaxDim,
                                   "Dc must be in [1, " + std::to_string(kernels::kCompressorMaxDim) + "]"));
  PG_RETURN_IF_ERROR(check.Require(a.rope_dim >= 0 && a.rope_dim % 2 == 0 && a.rope_dim <= dim.value(),
                                   "rope_dim must be even and at most Dc"));
  PG_RETURN_IF_ERROR(check.Require(page_size.value() > 0, "P must be positive"));
  PG_RETURN_IF_ERROR(check.Require(batch.value() < INT32_MAX && rows_in->value() <= INT32_MAX &&
                                       slots.value() <= INT32_MAX && num_positions.value() <= INT32_MAX &&
                                       max_pages.value() <= INT32_MAX && tables.value() <= INT32_MAX,
                                   "sizes overflow int32"));

  kernels::CompressorStepParams p;
  p.kv = a.kv.data;
  p.gate = a.gate.data;
  p.token_offsets = a.token_offsets.as<const int32_t>();
  p.ape = a.ape.as<const float>();
  p.kv_state = a.kv_state.as<float>();
  p.gate_state = a.gate_state.as<float>();
  p.state_slots = a.state_slots.as<const int32_t>();
  p.positions = a.positions.as<const int32_t>();
  p.norm_weight = a.norm_weight.as<const float>();
  p.rope_cos = a.rope_cos.as<const float>();
  p.rope_sin = a.rope_sin.as<const float>();
  p.cache = a.cache.data;
  p.cache_fp8 = fp8;
  p.page_table = a.page_table.as<const int32_t>();
  p.page_table_rows = has_rows ? a.page_table_rows.as<const int32_t>() : nullptr;
  p.num_page_tables = static_cast<int>(tables.value());
  if (has_snapshots) {
    p.snapshot_table = a.snapshot_table.as<const int32_t>();
    p.snapshot_kv = a.snapshot_kv;
    p.snapshot_gate = a.snapshot_gate;
    p.snapshot_stride = a.snapshot_stride;
    p.max_snapshots = static_cast<int>(max_snapshots.value());
    p.snapshot_interval = static_cast<int>(a.snapshot_interval);
    p.num_snapshots = static_cast<int>(a.num_snapshots);
  }
  if (has_trees) {
    p.tree_rows = a.tree_rows.as<const int32_t>();
    p.tree_paths = a.tree_paths.as<const int32_t>();
    p.tree_slots = a.tree_slots.as<const int32_t>();
    p.tree_positions = a.tree_positions.as<const int32_t>();
    p.path_capacity = static_cast<int>(path_capacity.value());
    p.stage_kv = a.stage_kv.as<float>();
    p.stage_gate = a.stage_gate.as<float>();
    p.stage_entries = a.stage_entries.data;
    p.num_stage_rows = static_cast<int>(stage_rows.value());
  }
  p.batch = static_cast<int>(batch.value());
  p.num_tokens = static_cast<int>(rows_in->value());
  p.dim = static_cast<int>(dim.value());
  p.ratio = static_cast<int>(a.ratio);
  p.coff = static_cast<int>(a.coff);
  p.rope_dim = static_cast<int>(a.rope_dim);
  p.num_positions = static_cast<int>(num_positions.value());
  p.num_state_slots = static_cast<int>(slots.value());
  p.page_size = static_cast<int>(page_size.value());
  p.max_pages = static_cast<int>(max_pages.value());
  p.num_cache_rows = pages.value() * page_size.value();
  p.eps = a.eps;
  p.input_type = *input_type;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchCompressorStep(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
