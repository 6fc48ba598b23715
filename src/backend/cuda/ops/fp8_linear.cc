#include "backend/cuda/ops/fp8_linear.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/quantize_fp8.cuh"

namespace peregrine::cuda {

namespace {

constexpr int64_t kGroup = kernels::kFp8GroupSize;

size_t AlignUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// cuBLASLt's BLK128x128_32F table for A (the weight, K-major with op T) is row-major
// [M / 128, ld] with ld = K / 128 rounded up to 4 (a 16-byte pitch).
int64_t WeightScalePitch(int64_t k) { return (k / kGroup + 3) / 4 * 4; }
bool NeedsPaddedWeightScale(int64_t k, int64_t m) { return (k / kGroup) % 4 != 0 && m / kGroup > 1; }

// cuBLASLt 13.1 on sm_90 offers the block-scaled mode (BLK128x128 x VEC128) only when the
// activation count is a multiple of 4 (probed with bench/fp8/cublaslt_probe.cc: N = 1, 2, 3,
// 17 have no algorithm; 4, 8, 12, 16, 24, ... do). Smaller or odd batches are padded with zero
// rows and the output rows copied out.
int64_t PaddedRows(int64_t n) { return (n + 3) / 4 * 4; }

// Offsets into the workspace, each 256-byte aligned.
struct WorkspaceLayout {
  size_t x_q = 0;        // [N4, K] e4m3 (N4 = N rounded up to 4; padding rows zero)
  size_t act_scale = 0;  // [K / 128, N4] f32: VEC128_32F for B (op N) is group-major, tokens contiguous
  size_t y_pad = 0;      // [N4, M] f32-sized rows, only when N4 != N
  size_t w_scale = 0;    // [M / 128, WeightScalePitch(K)] f32, only when NeedsPaddedWeightScale
  size_t total = 0;
};

WorkspaceLayout Layout(int64_t n, int64_t k, int64_t m) {
  const int64_t n4 = PaddedRows(n);
  WorkspaceLayout l;
  l.act_scale = AlignUp(static_cast<size_t>(n4 * k), 256);
  l.y_pad = l.act_scale + AlignUp(static_cast<size_t>(k / kGroup * n4) * sizeof(float), 256);
  l.w_scale = l.y_pad + (n4 != n ? AlignUp(static_cast<size_t>(n4 * m) * sizeof(float), 256) : 0);
  l.total = l.w_scale;
  if (NeedsPaddedWeightScale(k, m)) l.total += static_cast<size_t>(m / kGroup * WeightScalePitch(k)) * sizeof(float);
  return l;
}

cudaDataType_t OutType(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

template <typename T>
Status SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
  return CublasStatus(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what);
}

Status SetScalePointers(const LtMatmulPlan& plan, const void* w_scale, const void* act_scale) {
  PG_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale, "A scale pointer"));
  return SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, act_scale, "B scale pointer");
}

// Column-major view: y^T [M, N] = op_T(w stored K-major: [K, M]) . x_q^T [K, N] -- the "TN"
// layout FP8 GEMMs require. A carries 128x128 block scales, B per-128 vector scales.
Status BuildPlan(Blas& blas, int64_t n, int64_t k, int64_t m, DType out, const void* w_scale,
                 const void* act_scale, LtMatmulPlan& plan) {
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  PG_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "transa"));
  PG_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "transb"));
  const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  PG_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode, "A scale mode"));
  PG_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode, "B scale mode"));
  PG_RETURN_IF_ERROR(SetScalePointers(plan, w_scale, act_scale));
  const auto uk = static_cast<uint64_t>(k), un = static_cast<uint64_t>(n), um = static_cast<uint64_t>(m);
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, uk, um, k));
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, uk, un, k));
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.d, OutType(out), um, un, m));

  cublasLtMatmulPreference_t pref = nullptr;
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace_bytes = blas.workspace_bytes();
  // The launcher guarantees 16-byte alignment of every operand, not cuBLASLt's default 256.
  const uint32_t alignment = 16;
  cublasStatus_t status =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                           sizeof(workspace_bytes));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(blas.lt(), plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &result,
                                            &returned);
  }
  (void)cublasLtMatmulPreferenceDestroy(pref);
  const std::string shape = "N=" + std::to_string(n) + " K=" + std::to_string(k) + " M=" + std::to_string(m) +
                            " y " + std::string(DTypeName(out));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && returned == 0)) {
    return Unimplemented("fp8_linear: cuBLASLt has no block-scaled FP8 algorithm (VEC128 x BLK128x128) for " + shape +
                         "; it needs an sm_90 device and cuBLASLt >= 12.9");
  }
  PG_RETURN_IF_ERROR(CublasStatus(status, "cublasLtMatmulAlgoGetHeuristic"));
  plan.algo = result.algo;
  return Status::Ok();
}

}  // namespace

size_t Fp8LinearWorkspaceBytes(int64_t n, int64_t k, int64_t m) { return Layout(n, k, m).total; }

Status QuantizeFp8(const QuantizeFp8Args& a, cudaStream_t stream) {
  TensorChecker check("quantize_fp8");
  Dim rows("N"), k("K");
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&rows, &k}));
  PG_RETURN_IF_ERROR(check.Require(k.value() % kGroup == 0 && k.value() > 0 && k.value() <= INT32_MAX,
                                   "x: K=" + std::to_string(k.value()) + " must be a positive multiple of 128"));
  Dim groups("K/128", k.value() / kGroup);
  PG_RETURN_IF_ERROR(check.Check("x_q", a.x_q, DType::kF8E4M3, {&rows, &k}));
  PG_RETURN_IF_ERROR(check.Check("scale", a.scale, DType::kF32, {&rows, &groups}, Device::kCuda, 4));

  kernels::QuantizeFp8Params p;
  p.x = a.x.data;
  p.x_q = a.x_q.as<uint8_t>();
  p.scale = a.scale.as<float>();
  p.rows = rows.value();
  p.k = static_cast<int>(k.value());
  p.scale_row_stride = groups.value();
  p.scale_group_stride = 1;
  p.pow2_scales = a.pow2_scales;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeFp8(p, stream));
  return Status::Ok();
}

Status Fp8Linear(Blas& blas, const Fp8LinearArgs& a, cudaStream_t stream) {
  TensorChecker check("fp8_linear");
  Dim rows("N"), in("K"), out("M");
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&rows, &in}));
  PG_RETURN_IF_ERROR(check.Check("w", a.w, DType::kF8E4M3, {&out, &in}));
  PG_RETURN_IF_ERROR(check.Require(in.value() % kGroup == 0 && in.value() > 0 && in.value() <= INT32_MAX,
                                   "x, w: K=" + std::to_string(in.value()) + " must be a positive multiple of 128"));
  PG_RETURN_IF_ERROR(check.Require(out.value() % kGroup == 0 && out.value() > 0 && out.value() <= INT32_MAX,
                                   "w: M=" + std::to_string(out.value()) + " must be a positive multiple of 128"));
  Dim out_blocks("M/128", out.value() / kGroup), in_blocks("K/128", in.value() / kGroup);
  PG_RETURN_IF_ERROR(check.Check("w_scale", a.w_scale, DType::kF32, {&out_blocks, &in_blocks}));
  PG_RETURN_IF_ERROR(check.Require(a.y.dtype == DType::kBF16 || a.y.dtype == DType::kF32, "y must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, a.y.dtype, {&rows, &out}));
  Dim workspace_bytes("workspace_bytes");
  PG_RETURN_IF_ERROR(check.Check("workspace", a.workspace, DType::kU8, {&workspace_bytes}, Device::kCuda, 256));
  const int64_t n = rows.value(), k = in.value(), m = out.value();
  PG_RETURN_IF_ERROR(check.Require(n <= INT32_MAX, "x: N overflows int32"));
  const WorkspaceLayout layout = Layout(n, k, m);
  PG_RETURN_IF_ERROR(check.Require(static_cast<size_t>(workspace_bytes.value()) >= layout.total,
                                   "workspace: " + std::to_string(workspace_bytes.value()) + " bytes, needs " +
                                       std::to_string(layout.total)));
  if (n == 0) return Status::Ok();
  if (blas.lt() == nullptr) return Internal("fp8_linear: Blas used before Create");

  auto* base = static_cast<uint8_t*>(a.workspace.data);
  uint8_t* x_q = base + layout.x_q;
  auto* act_scale = reinterpret_cast<float*>(base + layout.act_scale);
  const void* w_scale = a.w_scale.data;
  if (NeedsPaddedWeightScale(k, m)) {
    void* padded = base + layout.w_scale;
    const size_t row_bytes = static_cast<size_t>(k / kGroup) * sizeof(float);
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(padded, static_cast<size_t>(WeightScalePitch(k)) * sizeof(float),
                                              a.w_scale.data, row_bytes, row_bytes, static_cast<size_t>(m / kGroup),
                                              cudaMemcpyDeviceToDevice, stream));
    w_scale = padded;
  }

  const int64_t n4 = PaddedRows(n);
  if (n4 != n) {
    // Zero padding rows and scales keep the padded output columns finite.
    PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x_q + n * k, 0, static_cast<size_t>((n4 - n) * k), stream));
    PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(act_scale, 0, static_cast<size_t>(k / kGroup * n4) * sizeof(float), stream));
  }
  kernels::QuantizeFp8Params q;
  q.x = a.x.data;
  q.x_q = x_q;
  q.scale = act_scale;
  q.rows = n;
  q.k = static_cast<int>(k);
  q.scale_row_stride = 1;
  q.scale_group_stride = n4;
  q.pow2_scales = a.pow2_scales;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeFp8(q, stream));

  const std::array<int64_t, 6> key = {n4, k, m, static_cast<int64_t>(a.y.dtype), 0, 0};
  LtMatmulPlan* plan = blas.FindLtPlan(key);
  if (plan == nullptr) {
    LtMatmulPlan fresh;
    fresh.key = key;
    const Status built = BuildPlan(blas, n4, k, m, a.y.dtype, w_scale, act_scale, fresh);
    if (!built.ok()) {
      DestroyLtPlan(fresh);
      return built;
    }
    plan = blas.AddLtPlan(fresh);
  } else {
    PG_RETURN_IF_ERROR(SetScalePointers(*plan, w_scale, act_scale));
  }
  const float one = 1.0f, zero = 0.0f;
  void* d = n4 != n ? base + layout.y_pad : a.y.data;
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(blas.lt(), plan->desc, &one, a.w.data, plan->a, x_q, plan->b, &zero, d,
                                           plan->d, d, plan->d, &plan->algo, blas.workspace(), blas.workspace_bytes(),
                                           stream));
  if (n4 != n) {
    // Column-major [M, N4] with ld M is row-major [N4, M]: the first N rows are contiguous.
    PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.y.data, d, static_cast<size_t>(n * m) * DTypeBytes(a.y.dtype, 1),
                                            cudaMemcpyDeviceToDevice, stream));
  }
  return Status::Ok();
}

}  // namespace peregrine::cuda
