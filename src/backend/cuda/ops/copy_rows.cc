#include "backend/cuda/ops/copy_rows.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/copy_rows.cuh"

namespace peregrine::cuda {

Status CopyRows(const CopyRowsArgs& a, cudaStream_t stream) {
  TensorChecker check("copy_rows");
  Dim src_rows("S"), dst_rows("R"), width("W"), pairs("n");
  PG_RETURN_IF_ERROR(check.Check("src", a.src, a.src.dtype, {&src_rows, &width}));
  PG_RETURN_IF_ERROR(check.Check("dst", a.dst, a.src.dtype, {&dst_rows, &width}));
  PG_RETURN_IF_ERROR(check.Check("src_rows", a.src_rows, DType::kI32, {&pairs}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("dst_rows", a.dst_rows, DType::kI32, {&pairs}, Device::kCuda, 4));
  const int64_t row_bytes = width.value() * static_cast<int64_t>(DTypeBytes(a.src.dtype, 1));
  PG_RETURN_IF_ERROR(check.Require(row_bytes % 16 == 0, "row bytes must be a multiple of 16"));
  kernels::CopyRowsParams p;
  p.src = a.src.data;
  p.dst = a.dst.data;
  p.src_rows = a.src_rows.as<const int32_t>();
  p.dst_rows = a.dst_rows.as<const int32_t>();
  p.n = pairs.value();
  p.row_bytes = row_bytes;
  p.num_src_rows = src_rows.value();
  p.num_dst_rows = dst_rows.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchCopyRows(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
