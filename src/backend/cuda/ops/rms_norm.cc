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

  Dim tokens("T"), num_positions("num_positions"), half("rope_dim/2", a.rope_dim / 2);
  const bool rope = a.rope_positions.data != nullptr;
  if (rope) {
    PG_RETURN_IF_ERROR(check.Require(a.rope_dim > 0 && a.rope_dim % 8 == 0 && a.rope_dim <= n.value() &&
                                         n.value() % 8 == 0,
                                     "rope_dim a positive multiple of 8 within N, N a multiple of 8"));
    PG_RETURN_IF_ERROR(check.Check("rope_positions", a.rope_positions, DType::kI32, {&tokens}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("rope_cos", a.rope_cos, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Check("rope_sin", a.rope_sin, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
    PG_RETURN_IF_ERROR(check.Require(tokens.value() > 0 && rows.value() % tokens.value() == 0,
                                     "R must be a multiple of T (rows per position)"));
    PG_RETURN_IF_ERROR(check.Require(num_positions.value() <= INT32_MAX && rows.value() / tokens.value() <= INT32_MAX,
                                     "sizes overflow int32"));
  }

  PG_RETURN_IF_ERROR(check.Require(a.fp8_nope >= 0 && a.fp8_nope % 8 == 0 && a.fp8_nope <= n.value() &&
                                       (a.fp8_nope == 0 || n.value() % 8 == 0),
                                   "fp8_nope a multiple of 8 within N, N a multiple of 8"));

  kernels::RmsNormParams p;
  p.x = a.x.data;
  p.fp8_nope = static_cast<int>(a.fp8_nope);
  p.weight = a.weight.as<const float>();
  p.y = a.y.data;
  p.rows = rows.value();
  p.n = static_cast<int>(n.value());
  p.eps = a.eps;
  p.in_type = *in_type;
  p.out_type = *out_type;
  if (rope) {
    p.rope_positions = a.rope_positions.as<const int32_t>();
    p.rope_cos = a.rope_cos.as<const float>();
    p.rope_sin = a.rope_sin.as<const float>();
    p.rope_dim = static_cast<int>(a.rope_dim);
    p.rope_rows_per_position = static_cast<int>(rows.value() / tokens.value());
    p.rope_num_positions = static_cast<int>(num_positions.value());
  }
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchRmsNorm(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
