#include "backend/cuda/ops/rope.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/element_type.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/rope.cuh"

namespace peregrine::cuda {

Status Rope(const RopeArgs& a, cudaStream_t stream) {
  TensorChecker check("rope");
  Dim rows("R"), n("N"), tokens("T"), num_positions("num_positions"), half("rope_dim/2", a.rope_dim / 2);
  const auto type = ToElementType(a.x.dtype);
  PG_RETURN_IF_ERROR(check.Require(type.has_value(), "x must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Require(a.rope_dim > 0 && a.rope_dim % 2 == 0, "rope_dim must be even and positive"));
  PG_RETURN_IF_ERROR(check.Check("x", a.x, a.x.dtype, {&rows, &n}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("positions", a.positions, DType::kI32, {&tokens}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("cos", a.cos, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("sin", a.sin, DType::kF32, {&num_positions, &half}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(a.rope_dim <= n.value(), "rope_dim must not exceed N"));
  PG_RETURN_IF_ERROR(check.Require(tokens.value() > 0 && rows.value() % tokens.value() == 0,
                                   "R must be a multiple of T (rows per position)"));
  PG_RETURN_IF_ERROR(check.Require(num_positions.value() <= INT32_MAX && n.value() <= INT32_MAX, "sizes overflow int32"));

  kernels::RopeParams p;
  p.x = a.x.data;
  p.positions = a.positions.as<const int32_t>();
  p.cos = a.cos.as<const float>();
  p.sin = a.sin.as<const float>();
  p.rows = rows.value();
  p.n = static_cast<int>(n.value());
  p.rope_dim = static_cast<int>(a.rope_dim);
  p.rows_per_position = static_cast<int>(rows.value() / tokens.value());
  p.num_positions = static_cast<int>(num_positions.value());
  p.inverse = a.inverse;
  p.type = *type;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchRope(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
