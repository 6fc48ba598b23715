#include "backend/cuda/ops/fp8_w8a16.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/fp8_w8a16.cuh"
#include "kernels/quantize_fp8_blocks.cuh"

namespace peregrine::cuda {

namespace {

constexpr int64_t kBlock = kernels::kW8A16ScaleBlock;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct DeviceShape {
  int num_sms = 0;
  int compute_major = 0;
};

Result<DeviceShape> CurrentDevice() {
  int device = 0;
  DeviceShape d;
  PG_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  PG_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, device));
  PG_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&d.compute_major, cudaDevAttrComputeCapabilityMajor, device));
  return d;
}

}  // namespace

Status Fp8W8A16Linear(const Fp8W8A16Args& a, cudaStream_t stream) {
  TensorChecker check("fp8_w8a16");
  Dim rows("N"), in("K"), out("M");
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&rows, &in}));
  PG_RETURN_IF_ERROR(check.Check("w", a.w, DType::kF8E4M3, {&out, &in}));
  PG_RETURN_IF_ERROR(check.Require(in.value() % kernels::kW8A16MinK == 0 && in.value() > 0 && in.value() <= INT32_MAX,
                                   "x, w: K=" + std::to_string(in.value()) + " must be a positive multiple of 64"));
  PG_RETURN_IF_ERROR(check.Require(out.value() > 0 && out.value() <= INT32_MAX,
                                   "w: M=" + std::to_string(out.value()) + " must be positive and fit int32"));
  Dim out_blocks("ceil(M/128)", CeilDiv(out.value(), kBlock)), in_blocks("ceil(K/128)", CeilDiv(in.value(), kBlock));
  PG_RETURN_IF_ERROR(check.Check("w_scale", a.w_scale, DType::kF32, {&out_blocks, &in_blocks}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(a.y.dtype == DType::kBF16 || a.y.dtype == DType::kF32, "y must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, a.y.dtype, {&rows, &out}, Device::kCuda, a.y.dtype == DType::kF32 ? 4 : 2));
  PG_RETURN_IF_ERROR(check.Require(out.value() <= 65535LL * kernels::kW8A16RowsPerCta,
                                   "w: M=" + std::to_string(out.value()) + " exceeds the grid's row tiles"));
  if (rows.value() == 0) return Status::Ok();

  PG_ASSIGN_OR_RETURN(const DeviceShape device, CurrentDevice());
  kernels::Fp8W8A16Params p;
  p.x = a.x.data;
  p.w = a.w.as<uint8_t>();
  p.scale = a.w_scale.as<float>();
  p.y = a.y.data;
  p.y_f32 = a.y.dtype == DType::kF32;
  p.n = rows.value();
  p.m = static_cast<int>(out.value());
  p.k = static_cast<int>(in.value());
  p.k_split = kernels::Fp8W8A16KSplit(p.m, p.k, device.num_sms, device.compute_major);
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchFp8W8A16(p, stream));
  return Status::Ok();
}

Status QuantizeFp8Blocks(const QuantizeFp8BlocksArgs& a, cudaStream_t stream) {
  TensorChecker check("quantize_fp8_blocks");
  Dim rows("M"), cols("K");
  PG_RETURN_IF_ERROR(check.Check("w", a.w, DType::kBF16, {&rows, &cols}, Device::kCuda, 2));
  PG_RETURN_IF_ERROR(check.Check("q", a.q, DType::kF8E4M3, {&rows, &cols}, Device::kCuda, 1));
  Dim row_blocks("ceil(M/128)", CeilDiv(rows.value(), kBlock)), col_blocks("ceil(K/128)", CeilDiv(cols.value(), kBlock));
  PG_RETURN_IF_ERROR(check.Check("scale", a.scale, DType::kF32, {&row_blocks, &col_blocks}, Device::kCuda, 4));
  kernels::QuantizeFp8BlocksParams p;
  p.w = a.w.data;
  p.q = a.q.as<uint8_t>();
  p.scale = a.scale.as<float>();
  p.rows = rows.value();
  p.cols = cols.value();
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeFp8Blocks(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
