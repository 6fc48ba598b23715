#include "backend/cuda/ops/fp8_projection.h"

#include <algorithm>
#include <string>

#include "backend/cuda/ops/fp8_linear.h"
#include "backend/cuda/ops/fp8_w8a16.h"
#include "backend/cuda/ops/tensor_check.h"

namespace peregrine::cuda {

namespace {

constexpr int64_t kBlock = 128;

bool FitsCublasLt(int64_t k, int64_t m) { return k % kBlock == 0 && m % kBlock == 0 && k > 0 && m > 0; }

Tensor Rows(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t cols = t.shape[1];
  char* base = static_cast<char*>(t.data) + static_cast<int64_t>(DTypeBytes(t.dtype, static_cast<size_t>(begin * cols)));
  return Tensor::Contiguous(base, t.dtype, {count, cols}, Device::kCuda);
}

Status W8A16Rows(const Fp8ProjectionArgs& a, int64_t begin, int64_t count, cudaStream_t stream) {
  if (count == 0) return Status::Ok();
  return Fp8W8A16Linear({Rows(a.x, begin, count), a.w, a.w_scale, Rows(a.y, begin, count)}, stream);
}

}  // namespace

size_t Fp8ProjectionWorkspaceBytes(int64_t k, int64_t m) {
  return FitsCublasLt(k, m) ? Fp8LinearWorkspaceBytes(kFp8ProjectionChunkRows, k, m) : 0;
}

Status Fp8Projection(Blas& blas, const Fp8ProjectionArgs& a, cudaStream_t stream) {
  TensorChecker check("fp8_projection");
  Dim rows("N"), in("K"), out("M");
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&rows, &in}));
  PG_RETURN_IF_ERROR(check.Check("w", a.w, DType::kF8E4M3, {&out, &in}));
  PG_RETURN_IF_ERROR(check.Require(a.y.dtype == DType::kBF16 || a.y.dtype == DType::kF32, "y must be bf16 or f32"));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, a.y.dtype, {&rows, &out}, Device::kCuda, a.y.dtype == DType::kF32 ? 4 : 2));
  const int64_t n = rows.value(), k = in.value(), m = out.value();
  // W8A16 is batch-invariant per row; cuBLASLt (prefill sizes) rounds the activations to e4m3.
  if (n <= kFp8W8A16MaxRows || !FitsCublasLt(k, m) || blas.batch_invariant()) return W8A16Rows(a, 0, n, stream);

  const size_t need = Fp8ProjectionWorkspaceBytes(k, m);
  Dim workspace_bytes("workspace_bytes");
  PG_RETURN_IF_ERROR(check.Check("workspace", a.workspace, DType::kU8, {&workspace_bytes}, Device::kCuda, 256));
  PG_RETURN_IF_ERROR(check.Require(static_cast<size_t>(workspace_bytes.value()) >= need,
                                   "workspace: " + std::to_string(workspace_bytes.value()) + " bytes, needs " +
                                       std::to_string(need)));
  const int64_t lt_rows = n / 4 * 4;
  for (int64_t begin = 0; begin < lt_rows; begin += kFp8ProjectionChunkRows) {
    const int64_t count = std::min(kFp8ProjectionChunkRows, lt_rows - begin);
    Fp8LinearArgs lt;
    lt.x = Rows(a.x, begin, count);
    lt.w = a.w;
    lt.w_scale = a.w_scale;
    lt.y = Rows(a.y, begin, count);
    lt.workspace = Tensor::Contiguous(a.workspace.data, DType::kU8,
                                      {static_cast<int64_t>(Fp8LinearWorkspaceBytes(count, k, m))}, Device::kCuda);
    const Status s = Fp8Linear(blas, lt, stream);
    // No block-scaled cuBLASLt kernel on this device: every row through W8A16 instead.
    if (s.code() == StatusCode::kUnimplemented) return W8A16Rows(a, 0, n, stream);
    PG_RETURN_IF_ERROR(s);
  }
  return W8A16Rows(a, lt_rows, n - lt_rows, stream);
}

}  // namespace peregrine::cuda
