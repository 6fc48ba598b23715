#include "backend/cuda/ops/linear.h"

#include "backend/cuda/ops/tensor_check.h"

namespace peregrine::cuda {

namespace {

cudaDataType_t CudaType(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

Status Linear(Blas& blas, const LinearArgs& a, cudaStream_t stream) {
  TensorChecker check("linear");
  Dim rows("N"), in("in"), out("out");
  const bool floating = (a.x.dtype == DType::kBF16 || a.x.dtype == DType::kF32) &&
                        (a.y.dtype == DType::kBF16 || a.y.dtype == DType::kF32);
  PG_RETURN_IF_ERROR(check.Require(floating, "x and y must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Require(a.w.dtype == a.x.dtype, "x and w must share a dtype"));
  PG_RETURN_IF_ERROR(check.Check("x", a.x, a.x.dtype, {&rows, &in}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("w", a.w, a.w.dtype, {&out, &in}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, a.y.dtype, {&rows, &out}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(rows.value() <= INT32_MAX && in.value() <= INT32_MAX && out.value() <= INT32_MAX,
                                   "sizes overflow int32"));
  if (rows.value() == 0 || out.value() == 0) return Status::Ok();

  PG_ASSIGN_OR_RETURN(cublasHandle_t handle, blas.On(stream));
  const float one = 1.0f;
  const float zero = 0.0f;
  const int n = static_cast<int>(rows.value());
  const int k = static_cast<int>(in.value());
  const int m = static_cast<int>(out.value());
  // Column-major view: y^T (out x N) = w (stored in-major: op T) . x^T (in x N).
  PG_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a.w.data,
                                         CudaType(a.w.dtype), k, a.x.data, CudaType(a.x.dtype), k, &zero, a.y.data,
                                         CudaType(a.y.dtype), m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

}  // namespace peregrine::cuda
