#include "backend/cuda/ops/quantize_mxfp4.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/quantize_mxfp4.cuh"

namespace peregrine::cuda {

Status QuantizeMxfp4(const QuantizeMxfp4Args& a, cudaStream_t stream) {
  TensorChecker check("quantize_mxfp4");
  Dim rows("R"), cols("C");
  PG_RETURN_IF_ERROR(check.Check("w", a.w, DType::kBF16, {&rows, &cols}, Device::kCuda, 16));
  PG_RETURN_IF_ERROR(check.Require(cols.value() % 32 == 0, "C must be a multiple of 32"));
  Dim half("C/2", cols.value() / 2), groups("C/32", cols.value() / 32);
  PG_RETURN_IF_ERROR(check.Check("codes", a.codes, DType::kU8, {&rows, &half}, Device::kCuda, 16));
  PG_RETURN_IF_ERROR(check.Check("scales", a.scales, DType::kU8, {&rows, &groups}, Device::kCuda, 1));
  kernels::QuantizeMxfp4Params p;
  p.w = a.w.data;
  p.codes = a.codes.as<uint8_t>();
  p.scales = a.scales.as<uint8_t>();
  p.rows = rows.value();
  p.cols = cols.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeMxfp4(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
