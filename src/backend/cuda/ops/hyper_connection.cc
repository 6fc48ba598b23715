#include "backend/cuda/ops/hyper_connection.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/hyper_connection.cuh"

namespace peregrine::cuda {

namespace {

// Small per-mix vectors are read one element at a time: 4-byte alignment suffices.
constexpr int64_t kScalarAlignment = 4;
// The mixes GEMM puts token tiles on grid.y.
constexpr int64_t kMaxRows = int64_t{65535} * kernels::kHcTokenTile;

Status CheckStreamShape(const TensorChecker& check, const Dim& hc, const Dim& d) {
  PG_RETURN_IF_ERROR(check.Require(hc.value() >= 1 && hc.value() <= kernels::kHcMaxMult, "hc in [1, 8]"));
  return check.Require(d.value() > 0 && d.value() % 8 == 0 && d.value() <= kernels::kHcMaxDim,
                       "D a positive multiple of 8, at most 8192");
}

}  // namespace

int64_t HyperConnectionWorkspaceFloats(int64_t num_tokens, int64_t hc, int64_t dim, int64_t num_mixes,
                                       bool batch_invariant) {
  return kernels::HcWorkspaceFloatsOf(num_tokens, num_mixes, hc * dim, batch_invariant);
}

Status HyperConnectionPre(const HcPreArgs& a, cudaStream_t stream) {
  TensorChecker check("hyper_connection_pre");
  Dim n("N"), hc("hc"), d("D"), w("W");
  PG_RETURN_IF_ERROR(check.Check("streams", a.streams, DType::kF32, {&n, &hc, &d}));
  PG_RETURN_IF_ERROR(CheckStreamShape(check, hc, d));
  Dim m("M", (2 + hc.value()) * hc.value()), k("hc*D", hc.value() * d.value()), three("3", 3);
  PG_RETURN_IF_ERROR(check.Check("fn", a.fn, DType::kF32, {&m, &k}));
  PG_RETURN_IF_ERROR(check.Check("base", a.base, DType::kF32, {&m}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Check("scale", a.scale, DType::kF32, {&three}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Check("norm_weight", a.norm_weight, DType::kF32, {&d}));
  PG_RETURN_IF_ERROR(check.Check("workspace", a.workspace, DType::kF32, {&w}));
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&n, &d}));
  PG_RETURN_IF_ERROR(check.Check("post", a.post, DType::kF32, {&n, &hc}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Check("comb", a.comb, DType::kF32, {&n, &hc, &hc}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Require(w.value() >= HyperConnectionWorkspaceFloats(n.value(), hc.value(), d.value(),
                                                                               m.value(), a.batch_invariant),
                                   "workspace of at least HyperConnectionWorkspaceFloats(N, hc, D, M) floats"));
  PG_RETURN_IF_ERROR(check.Require(a.sinkhorn_iters >= 1, "sinkhorn_iters >= 1"));
  PG_RETURN_IF_ERROR(check.Require(n.value() <= kMaxRows, "N at most 65535 * 32"));

  kernels::HcCollapseParams p;
  p.streams = a.streams.as<const float>();
  p.rows = nullptr;
  p.fn = a.fn.as<const float>();
  p.base = a.base.as<const float>();
  p.scale = a.scale.as<const float>();
  p.norm_weight = a.norm_weight.as<const float>();
  p.workspace = a.workspace.as<float>();
  p.x = a.x.data;
  p.post = a.post.as<float>();
  p.comb = a.comb.as<float>();
  p.num_tokens = n.value();
  p.num_stream_rows = n.value();
  p.hc = static_cast<int>(hc.value());
  p.dim = static_cast<int>(d.value());
  p.has_comb = true;
  p.batch_invariant = a.batch_invariant;
  p.hc_eps = a.hc_eps;
  p.norm_eps = a.rms_norm_eps;
  p.sinkhorn_iters = a.sinkhorn_iters;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchHcCollapse(p, stream));
  return Status::Ok();
}

Status HyperConnectionPost(const HcPostArgs& a, cudaStream_t stream) {
  TensorChecker check("hyper_connection_post");
  Dim n("N"), hc("hc"), d("D");
  PG_RETURN_IF_ERROR(check.Check("streams", a.streams, DType::kF32, {&n, &hc, &d}));
  PG_RETURN_IF_ERROR(CheckStreamShape(check, hc, d));
  const bool moe = a.moe_y.data != nullptr;
  PG_RETURN_IF_ERROR(check.Require(moe != (a.f.data != nullptr), "exactly one of f and moe_y"));
  Dim k("K");
  if (moe) {
    PG_RETURN_IF_ERROR(check.Check("moe_topk_ids", a.moe_topk_ids, DType::kI32, {&n, &k}));
    PG_RETURN_IF_ERROR(check.Check("moe_topk_weights", a.moe_topk_weights, DType::kF32, {&n, &k}));
    Dim assignments("N*K", n.value() * k.value());
    PG_RETURN_IF_ERROR(check.Check("moe_y", a.moe_y, DType::kF32, {&assignments, &d}));
    PG_RETURN_IF_ERROR(check.CheckOptional("moe_shared", a.moe_shared, DType::kBF16, {&n, &d}));
    PG_RETURN_IF_ERROR(check.Require(k.value() >= 1 && k.value() <= 16, "K in [1, 16]"));
  } else {
    PG_RETURN_IF_ERROR(check.Check("f", a.f, DType::kBF16, {&n, &d}));
  }
  PG_RETURN_IF_ERROR(check.Check("post", a.post, DType::kF32, {&n, &hc}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Check("comb", a.comb, DType::kF32, {&n, &hc, &hc}, Device::kCuda, kScalarAlignment));

  kernels::HcExpandParams p;
  p.streams = a.streams.as<float>();
  p.f = a.f.data;
  p.post = a.post.as<const float>();
  p.comb = a.comb.as<const float>();
  p.num_tokens = n.value();
  p.hc = static_cast<int>(hc.value());
  p.dim = static_cast<int>(d.value());
  if (moe) {
    p.moe_y = a.moe_y.as<const float>();
    p.moe_topk_weights = a.moe_topk_weights.as<const float>();
    p.moe_topk_ids = a.moe_topk_ids.as<const int32_t>();
    p.moe_shared = a.moe_shared.data;
    p.moe_top_k = static_cast<int>(k.value());
  }
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchHcExpand(p, stream));
  return Status::Ok();
}

Status HyperConnectionHead(const HcHeadArgs& a, cudaStream_t stream) {
  TensorChecker check("hyper_connection_head");
  Dim s("S"), hc("hc"), d("D"), r("R"), w("W");
  PG_RETURN_IF_ERROR(check.Check("streams", a.streams, DType::kF32, {&s, &hc, &d}));
  PG_RETURN_IF_ERROR(CheckStreamShape(check, hc, d));
  if (a.rows.data == nullptr) r.Bind(s.value());
  PG_RETURN_IF_ERROR(check.CheckOptional("rows", a.rows, DType::kI32, {&r}));
  Dim k("hc*D", hc.value() * d.value()), one("1", 1);
  PG_RETURN_IF_ERROR(check.Check("fn", a.fn, DType::kF32, {&hc, &k}));
  PG_RETURN_IF_ERROR(check.Check("base", a.base, DType::kF32, {&hc}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Check("scale", a.scale, DType::kF32, {&one}, Device::kCuda, kScalarAlignment));
  PG_RETURN_IF_ERROR(check.Check("norm_weight", a.norm_weight, DType::kF32, {&d}));
  PG_RETURN_IF_ERROR(check.Check("workspace", a.workspace, DType::kF32, {&w}));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, DType::kBF16, {&r, &d}));
  PG_RETURN_IF_ERROR(check.Require(w.value() >= HyperConnectionWorkspaceFloats(r.value(), hc.value(), d.value(),
                                                                               hc.value(), a.batch_invariant),
                                   "workspace of at least HyperConnectionWorkspaceFloats(R, hc, D, hc) floats"));
  PG_RETURN_IF_ERROR(check.Require(r.value() <= kMaxRows, "R at most 65535 * 32"));

  kernels::HcCollapseParams p;
  p.streams = a.streams.as<const float>();
  p.rows = a.rows.as<const int32_t>();
  p.fn = a.fn.as<const float>();
  p.base = a.base.as<const float>();
  p.scale = a.scale.as<const float>();
  p.norm_weight = a.norm_weight.as<const float>();
  p.workspace = a.workspace.as<float>();
  p.x = a.y.data;
  p.post = nullptr;
  p.comb = nullptr;
  p.num_tokens = r.value();
  p.num_stream_rows = s.value();
  p.hc = static_cast<int>(hc.value());
  p.dim = static_cast<int>(d.value());
  p.has_comb = false;
  p.batch_invariant = a.batch_invariant;
  p.hc_eps = a.hc_eps;
  p.norm_eps = a.rms_norm_eps;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchHcCollapse(p, stream));
  return Status::Ok();
}

Status HyperConnectionLaneMean(const HcLaneMeanArgs& a, cudaStream_t stream) {
  TensorChecker check("hyper_connection_lane_mean");
  Dim n("N"), hc("hc"), d("D"), w("W");
  PG_RETURN_IF_ERROR(check.Check("streams", a.streams, DType::kF32, {&n, &hc, &d}));
  PG_RETURN_IF_ERROR(CheckStreamShape(check, hc, d));
  PG_RETURN_IF_ERROR(check.Check("out", a.out, DType::kBF16, {&n, &w}));
  PG_RETURN_IF_ERROR(check.Require(w.value() % 8 == 0, "out rows of a multiple of 8 elements"));
  PG_RETURN_IF_ERROR(check.Require(a.column >= 0 && a.column % 8 == 0 && a.column + d.value() <= w.value(),
                                   "column a multiple of 8 with column + D <= W"));

  kernels::HcLaneMeanParams p;
  p.streams = a.streams.as<const float>();
  p.out = static_cast<uint16_t*>(a.out.data) + a.column;
  p.out_stride = w.value();
  p.num_tokens = n.value();
  p.hc = static_cast<int>(hc.value());
  p.dim = static_cast<int>(d.value());
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchHcLaneMean(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
