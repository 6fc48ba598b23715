#include "backend/cuda/ops/output_projection.h"

#include "backend/cuda/ops/fp8_projection.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/tensor_check.h"

namespace peregrine::cuda {

Status GroupedOutputProjection(Blas& blas, const OutputProjectionArgs& a, cudaStream_t stream) {
  TensorChecker check("grouped_output_projection");
  Dim batch("B"), heads("H"), dim("D"), groups("G"), rank("R"), group_in("H*D/G"), hidden("hidden"), mid_in("G*R");
  PG_RETURN_IF_ERROR(check.Check("o", a.o, DType::kBF16, {&batch, &heads, &dim}));
  PG_RETURN_IF_ERROR(check.Check("wo_a", a.wo_a, DType::kBF16, {&groups, &rank, &group_in}));
  PG_RETURN_IF_ERROR(check.Require(groups.value() > 0 && group_in.value() * groups.value() == heads.value() * dim.value(),
                                   "wo_a's input width times G must equal H*D"));
  mid_in.Bind(groups.value() * rank.value());
  const bool fp8 = a.wo_b.dtype == DType::kF8E4M3;
  PG_RETURN_IF_ERROR(check.Check("wo_b", a.wo_b, fp8 ? DType::kF8E4M3 : DType::kBF16, {&hidden, &mid_in}));
  PG_RETURN_IF_ERROR(check.Check("mid", a.mid, DType::kBF16, {&batch, &groups, &rank}));
  PG_RETURN_IF_ERROR(check.Check("out", a.out, DType::kBF16, {&batch, &hidden}));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= INT32_MAX && mid_in.value() <= INT32_MAX &&
                                       hidden.value() <= INT32_MAX && group_in.value() * groups.value() <= INT32_MAX,
                                   "sizes overflow int32"));
  if (batch.value() == 0) return Status::Ok();

  // Every head group as one strided, grouped projection.
  StridedLinearArgs s;
  {
    const int64_t gi = group_in.value(), r = rank.value(), g = groups.value();
    s.x = a.o.data;
    s.x_stride = heads.value() * dim.value();
    s.w = a.wo_a.data;
    s.y = a.mid.data;
    s.y_stride = g * r;
    s.n = batch.value();
    s.m = r;
    s.k = gi;
    s.groups = g;
    s.x_group = gi;
    s.w_group = r * gi;
    s.y_group = r;
  }
  const bool decode = !blas.batch_invariant() && FitsDecodeLinear(s);
  if (blas.batch_invariant() || decode) {
    // The head groups in one launch (batch-invariant, or the decode-sized kernel), then wo_b
    // through Linear, which picks the same kind of kernel.
    PG_RETURN_IF_ERROR(decode ? DecodeLinear(blas, s, stream) : BatchInvariantLinear(blas, s, stream));
    const Tensor mid = Tensor::Contiguous(a.mid.data, DType::kBF16, {batch.value(), mid_in.value()}, Device::kCuda);
    if (!fp8) return Linear(blas, {mid, a.wo_b, a.out}, stream);
    Fp8ProjectionArgs p;
    p.x = mid;
    p.w = a.wo_b;
    p.w_scale = a.wo_b_scale;
    p.y = a.out;
    p.workspace = a.fp8_workspace;
    return Fp8Projection(blas, p, stream);
  }

  PG_ASSIGN_OR_RETURN(cublasHandle_t handle, blas.On(stream));
  const float one = 1.0f;
  const float zero = 0.0f;
  const int b = static_cast<int>(batch.value());
  const int g = static_cast<int>(groups.value());
  const int r = static_cast<int>(rank.value());
  const int gi = static_cast<int>(group_in.value());
  const int hd = static_cast<int>(heads.value() * dim.value());
  const int h = static_cast<int>(hidden.value());
  // Column-major view: mid^T[g] (R x B, ld G*R) = wo_a[g] (R x GI, stored GI-major: op T) . o_g^T (GI x B, ld H*D).
  PG_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, r, b, gi, &one, a.wo_a.data, CUDA_R_16BF, gi,
      static_cast<long long>(r) * gi, a.o.data, CUDA_R_16BF, hd, gi, &zero, a.mid.data, CUDA_R_16BF, g * r, r, g,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (fp8) {
    // Fp8Projection checks wo_b_scale and the workspace.
    Fp8ProjectionArgs p;
    p.x = Tensor::Contiguous(a.mid.data, DType::kBF16, {batch.value(), mid_in.value()}, Device::kCuda);
    p.w = a.wo_b;
    p.w_scale = a.wo_b_scale;
    p.y = a.out;
    p.workspace = a.fp8_workspace;
    return Fp8Projection(blas, p, stream);
  }
  // out^T (hidden x B, ld hidden) = wo_b (hidden x G*R, stored row-major: op T) . mid^T (G*R x B).
  PG_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, h, b, g * r, &one, a.wo_b.data,
                                         CUDA_R_16BF, g * r, a.mid.data, CUDA_R_16BF, g * r, &zero, a.out.data,
                                         CUDA_R_16BF, h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

}  // namespace peregrine::cuda
