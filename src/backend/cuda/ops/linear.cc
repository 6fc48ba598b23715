#include "backend/cuda/ops/linear.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/bf16_gemv.cuh"
#include "kernels/bf16_linear.cuh"

namespace peregrine::cuda {

namespace {

cudaDataType_t CudaType(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The fields the batch-invariant and the decode-sized kernels' params share with the strided
// arguments (the callers have checked the sizes fit the narrower types).
template <typename Params>
Params StridedParams(const StridedLinearArgs& a) {
  Params p;
  p.x = a.x;
  p.w = a.w;
  p.y = a.y;
  p.y_f32 = a.y_f32;
  p.n = static_cast<decltype(p.n)>(a.n);
  p.m = static_cast<int>(a.m);
  p.k = static_cast<int>(a.k);
  p.x_stride = a.x_stride;
  p.y_stride = a.y_stride;
  p.groups = static_cast<int>(a.groups);
  p.x_group = a.x_group;
  p.w_group = a.w_group;
  p.y_group = a.y_group;
  return p;
}

// The strided arguments of contiguous x [n, k], w [m, k] (or [groups, m, k]) and y [n, m] (or
// [groups, n, m]).
StridedLinearArgs Contiguous(const Tensor& x, const Tensor& w, const Tensor& y, int64_t n, int64_t m, int64_t k) {
  StridedLinearArgs s;
  s.x = x.data;
  s.x_stride = k;
  s.w = w.data;
  s.y = y.data;
  s.y_f32 = y.dtype == DType::kF32;
  s.y_stride = m;
  s.n = n;
  s.m = m;
  s.k = k;
  return s;
}

// Checks `a` (Linear's and CublasLinear's contract) and gives its sizes as the strided
// arguments of the same call.
Result<StridedLinearArgs> CheckedArgs(TensorChecker& check, const LinearArgs& a) {
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
  return Contiguous(a.x, a.w, a.y, rows.value(), out.value(), in.value());
}

// y^T (M x N, column-major) = w (stored K-major: op T) . x^T (K x N), for checked arguments.
Status CublasGemm(Blas& blas, const LinearArgs& a, const StridedLinearArgs& s, cudaStream_t stream) {
  if (s.n == 0 || s.m == 0) return Status::Ok();
  PG_ASSIGN_OR_RETURN(cublasHandle_t handle, blas.On(stream));
  const float one = 1.0f;
  const float zero = 0.0f;
  const int n = static_cast<int>(s.n), k = static_cast<int>(s.k), m = static_cast<int>(s.m);
  PG_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a.w.data,
                                         CudaType(a.w.dtype), k, a.x.data, CudaType(a.x.dtype), k, &zero, a.y.data,
                                         CudaType(a.y.dtype), m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

}  // namespace

Status Linear(Blas& blas, const LinearArgs& a, cudaStream_t stream) {
  TensorChecker check("linear");
  PG_ASSIGN_OR_RETURN(const StridedLinearArgs s, CheckedArgs(check, a));
  if (s.n == 0 || s.m == 0) return Status::Ok();
  if (blas.batch_invariant()) {
    PG_RETURN_IF_ERROR(check.Require(a.x.dtype == DType::kBF16,
                                     "batch-invariant mode has bf16 projections only (x and w are f32)"));
    return BatchInvariantLinear(blas, s, stream);
  }
  if (a.x.dtype == DType::kBF16 && FitsDecodeLinear(s)) return DecodeLinear(blas, s, stream);
  return CublasGemm(blas, a, s, stream);
}

Status GroupedLinear(Blas& blas, const GroupedLinearArgs& a, cudaStream_t stream) {
  TensorChecker check("grouped_linear");
  Dim groups("G"), rows("N"), in("K"), out("M");
  PG_RETURN_IF_ERROR(check.Require(a.y.dtype == DType::kBF16 || a.y.dtype == DType::kF32, "y must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&rows, &in}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("w", a.w, DType::kBF16, {&groups, &out, &in}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, a.y.dtype, {&groups, &rows, &out}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(rows.value() <= INT32_MAX && in.value() <= INT32_MAX && out.value() <= INT32_MAX,
                                   "sizes overflow int32"));
  if (rows.value() == 0 || out.value() == 0 || groups.value() == 0) return Status::Ok();
  StridedLinearArgs s = Contiguous(a.x, a.w, a.y, rows.value(), out.value(), in.value());
  s.groups = groups.value();
  s.w_group = out.value() * in.value();
  s.y_group = rows.value() * out.value();
  if (blas.batch_invariant()) return BatchInvariantLinear(blas, s, stream);
  if (FitsDecodeLinear(s) && groups.value() <= 65535) return DecodeLinear(blas, s, stream);
  const size_t w_bytes = static_cast<size_t>(s.w_group) * 2;
  const size_t y_bytes = static_cast<size_t>(s.y_group) * (s.y_f32 ? 4 : 2);
  for (int64_t g = 0; g < groups.value(); ++g) {
    const LinearArgs one{a.x,
                         Tensor::Contiguous(static_cast<char*>(a.w.data) + g * w_bytes, DType::kBF16,
                                            {out.value(), in.value()}, Device::kCuda),
                         Tensor::Contiguous(static_cast<char*>(a.y.data) + g * y_bytes, a.y.dtype,
                                            {rows.value(), out.value()}, Device::kCuda)};
    PG_RETURN_IF_ERROR(Linear(blas, one, stream));
  }
  return Status::Ok();
}

Status CublasLinear(Blas& blas, const LinearArgs& a, cudaStream_t stream) {
  TensorChecker check("cublas_linear");
  PG_ASSIGN_OR_RETURN(const StridedLinearArgs s, CheckedArgs(check, a));
  return CublasGemm(blas, a, s, stream);
}

Status BatchInvariantLinear(const Blas& blas, const StridedLinearArgs& a, cudaStream_t stream) {
  TensorChecker check("batch_invariant_linear");
  PG_RETURN_IF_ERROR(check.Require(a.k > 0 && a.k % 16 == 0 && a.k <= INT32_MAX,
                                   "K=" + std::to_string(a.k) + " must be a positive multiple of 16"));
  PG_RETURN_IF_ERROR(check.Require(a.groups >= 1 && a.m > 0 &&
                                       (a.m + kernels::kBf16LinearRowsPerCta - 1) / kernels::kBf16LinearRowsPerCta *
                                               a.groups <=
                                           65535,
                                   "M=" + std::to_string(a.m) + " times " + std::to_string(a.groups) +
                                       " groups must be positive and fit the grid's row tiles"));
  PG_RETURN_IF_ERROR(check.Require(a.x_group % 8 == 0 && a.w_group % 8 == 0, "group strides must be multiples of 8"));
  PG_RETURN_IF_ERROR(check.Require(a.n >= 0, "N must not be negative"));
  PG_RETURN_IF_ERROR(check.Require(a.x_stride >= a.k && a.x_stride % 8 == 0 && a.y_stride >= a.m,
                                   "row strides: x's must be >= K and a multiple of 8, y's >= M"));
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  PG_RETURN_IF_ERROR(check.Require(aligned(a.x) && aligned(a.w), "x and w must be 16-byte aligned"));
  if (a.n == 0) return Status::Ok();
  kernels::Bf16LinearParams p = StridedParams<kernels::Bf16LinearParams>(a);
  p.k_split = kernels::Bf16LinearKSplit(p.m, p.k, blas.num_sms(), blas.compute_major());
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchBf16Linear(p, stream));
  return Status::Ok();
}

bool FitsDecodeLinear(const StridedLinearArgs& a) {
  return a.n >= 1 && a.n <= kernels::kBf16GemvMaxTokens && a.k > 0 && a.k % 8 == 0 && a.k <= INT32_MAX &&
         a.x_stride >= a.k && a.x_stride % 8 == 0 && a.x_group % 8 == 0 && a.w_group % 8 == 0 && Aligned16(a.x) &&
         Aligned16(a.w);
}

Status DecodeLinear(const Blas& blas, const StridedLinearArgs& a, cudaStream_t stream) {
  TensorChecker check("decode_linear");
  PG_RETURN_IF_ERROR(check.Require(FitsDecodeLinear(a), "N=" + std::to_string(a.n) + ", K=" + std::to_string(a.k) +
                                                            ": needs N <= " +
                                                            std::to_string(kernels::kBf16GemvMaxTokens) +
                                                            ", K and x's strides multiples of 8, 16-byte aligned x and w"));
  PG_RETURN_IF_ERROR(check.Require(a.m > 0 && a.m <= INT32_MAX && a.groups >= 1 && a.groups <= 65535 &&
                                       a.y_stride >= a.m,
                                   "M=" + std::to_string(a.m) + " and " + std::to_string(a.groups) +
                                       " groups must be positive and fit the grid; y's row stride must be >= M"));
  kernels::Bf16GemvParams p = StridedParams<kernels::Bf16GemvParams>(a);
  p.warps_per_row = kernels::Bf16GemvWarpsPerRow(p.m, p.k, p.groups, blas.num_sms());
  p.max_ctas = kernels::Bf16GemvMaxCtas(p.n, p.groups, blas.num_sms());
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchBf16Gemv(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
