#include "backend/cuda/ops/rms_norm.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/element_type.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/rms_norm.cuh"

namespace peregrine::cuda {

Status RmsNorm(const RmsNormArgs& a, cudaStream_t stream) {
  TensorChecker check("rms_norm");
  Dim rows("R"), n("N");
  const auto in_type = ToElementType(a.x.dtype);
  const auto out_type = ToElementType(a.y.dtype);
  PG_RETURN_IF_ERROR(check.Require(in_type.has_value(), "x must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Require(out_type.has_value(), "y must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Check("x", a.x, a.x.dtype, {&rows, &n}));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, a.y.dtype, {&rows, &n}));
  PG_RETURN_IF_ERROR(check.CheckOptional("weight", a.weight, DType::kF32, {&n}));
  PG_RETURN_IF_ERROR(check.Require(a.x.data != a.y.data || a.x.dtype == a.y.dtype, "in place needs one dtype"));
  PG_RETURN_IF_ERROR(check.Require(n.value() > 0 && n.value() <= (int64_t{1} << 30), "N must be in [1, 2^30]"));

  kernels::RmsNormParams p;
  p.x = a.x.data;
  p.weight = a.weight.as<const float>();
  p.y = a.y.data;
  p.rows = rows.value();
  p.n = static_cast<int>(n.value());
  p.eps = a.eps;
  p.in_type = *in_type;
  p.out_type = *out_type;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchRmsNorm(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
