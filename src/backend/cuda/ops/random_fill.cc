#include "backend/cuda/ops/random_fill.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/element_type.h"
#include "kernels/random_fill.cuh"

namespace peregrine::cuda {

Status RandomUniform(const Tensor& t, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  const auto type = ToElementType(t.dtype);
  if (!type || t.device != Device::kCuda || !t.is_contiguous())
    return InvalidArgument("random_uniform: tensor must be a contiguous bf16/f32 device tensor, got " + t.ToString());
  kernels::RandomFillParams p;
  p.data = t.data;
  p.n = t.numel();
  p.seed = seed;
  p.lo = lo;
  p.hi = hi;
  p.kind = kernels::RandomFillKind::kUniform;
  p.type = *type;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchRandomFill(p, stream));
  return Status::Ok();
}

Status RandomBytes(const Tensor& t, uint64_t seed, int lo, int hi, cudaStream_t stream) {
  if (t.device != Device::kCuda || !t.is_contiguous() || DTypeBits(t.dtype) > 8 || lo < 0 || hi > 255 || lo > hi)
    return InvalidArgument("random_bytes: tensor must be a contiguous 8-bit device tensor and 0 <= lo <= hi <= 255, got " +
                           t.ToString());
  kernels::RandomFillParams p;
  p.data = t.data;
  p.n = static_cast<int64_t>(DTypeBytes(t.dtype, static_cast<size_t>(t.numel())));
  p.seed = seed;
  p.lo = static_cast<float>(lo);
  p.hi = static_cast<float>(hi);
  p.kind = kernels::RandomFillKind::kBytes;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchRandomFill(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
