#include "backend/cuda/ops/moe.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/moe_router.cuh"

namespace peregrine::cuda {

namespace {

constexpr int64_t kMaxInt = (int64_t{1} << 31) - 1;

// One stacked expert matrix [E, R, C] in `format`; `cols` must already be bound (a multiple of 32).
Status CheckMatrix(TensorChecker& check, const std::string& name, const MoeExpertMatrix& m,
                   MoeWeightFormat format, Dim& experts, Dim& rows, Dim& cols) {
  const std::string scale_name = name + ".scale";
  switch (format) {
    case MoeWeightFormat::kBF16:
      PG_RETURN_IF_ERROR(check.Check(name, m.weight, DType::kBF16, {&experts, &rows, &cols}));
      return check.Require(m.scale.data == nullptr, scale_name + " must be absent for bf16 weights");
    case MoeWeightFormat::kMxfp4: {
      Dim packed("C/2", cols.value() / 2), blocks("C/32", cols.value() / 32);
      PG_RETURN_IF_ERROR(check.Require(m.weight.dtype == DType::kU8 || m.weight.dtype == DType::kI8,
                                       name + " (mxfp4) must be packed u8 or i8"));
      PG_RETURN_IF_ERROR(check.Check(name, m.weight, m.weight.dtype, {&experts, &rows, &packed}));
      PG_RETURN_IF_ERROR(check.Require(m.scale.dtype == DType::kU8 || m.scale.dtype == DType::kUE8M0,
                                       scale_name + " must be u8 or ue8m0"));
      return check.Check(scale_name, m.scale, m.scale.dtype, {&experts, &rows, &blocks}, Device::kCuda, 1);
    }
  }
  return check.Require(false, "a known weight format");
}

Status CheckExperts(const TensorChecker& check, const Dim& experts) {
  return check.Require(experts.value() >= 1 && experts.value() <= kernels::kMoeMaxExperts, "E in [1, 512]");
}

Status RouteParams(const MoeRouteArgs& a, kernels::MoeRouteParams* out) {
  TensorChecker check("moe_route");
  Dim tokens("N"), experts("E"), top_k("K"), vocab("V");
  PG_RETURN_IF_ERROR(check.Check("logits", a.logits, DType::kF32, {&tokens, &experts}));
  const bool learned = a.bias.data != nullptr;
  PG_RETURN_IF_ERROR(check.Require(learned != (a.tid2eid.data != nullptr),
                                   "exactly one of bias (learned) and tid2eid (hash routing)"));
  PG_RETURN_IF_ERROR(check.Require(learned || a.token_ids.data != nullptr, "token_ids for hash routing"));
  PG_RETURN_IF_ERROR(check.CheckOptional("bias", a.bias, DType::kF32, {&experts}));
  PG_RETURN_IF_ERROR(check.CheckOptional("tid2eid", a.tid2eid, DType::kI32, {&vocab, &top_k}));
  PG_RETURN_IF_ERROR(check.CheckOptional("token_ids", a.token_ids, DType::kI32, {&tokens}));
  PG_RETURN_IF_ERROR(check.Check("topk_ids", a.topk_ids, DType::kI32, {&tokens, &top_k}));
  PG_RETURN_IF_ERROR(check.Check("topk_weights", a.topk_weights, DType::kF32, {&tokens, &top_k}));
  PG_RETURN_IF_ERROR(CheckExperts(check, experts));
  PG_RETURN_IF_ERROR(check.Require(top_k.value() >= 1 && top_k.value() <= kernels::kMoeMaxTopK &&
                                       top_k.value() <= experts.value(),
                                   "K in [1, min(16, E)]"));
  PG_RETURN_IF_ERROR(check.Require(tokens.value() * top_k.value() <= kMaxInt, "N * K < 2^31"));
  PG_RETURN_IF_ERROR(check.Require(a.local_begin >= 0 && a.local_count >= 0 &&
                                       a.local_begin + a.local_count <= experts.value(),
                                   "local experts inside [0, E)"));

  kernels::MoeRouteParams p;
  p.logits = a.logits.as<const float>();
  p.bias = a.bias.as<const float>();
  p.tid2eid = a.tid2eid.as<const int32_t>();
  p.token_ids = learned ? nullptr : a.token_ids.as<const int32_t>();
  p.topk_ids = a.topk_ids.as<int32_t>();
  p.topk_weights = a.topk_weights.as<float>();
  p.num_tokens = static_cast<int>(tokens.value());
  p.num_experts = static_cast<int>(experts.value());
  p.top_k = static_cast<int>(top_k.value());
  p.vocab_size = learned ? 0 : vocab.value();
  p.routed_scaling_factor = a.routed_scaling_factor;
  const bool all = a.local_count == 0 || a.local_count == experts.value();
  p.local_begin = all ? 0 : a.local_begin;
  p.local_count = all ? 0 : a.local_count;
  *out = p;
  return Status::Ok();
}

Status AlignParams(const MoeAlignArgs& a, kernels::MoeAlignParams* out) {
  TensorChecker check("moe_align");
  Dim tokens("N"), top_k("K"), offsets("E+1");
  PG_RETURN_IF_ERROR(check.Check("topk_ids", a.topk_ids, DType::kI32, {&tokens, &top_k}));
  Dim assignments("N*K", tokens.value() * top_k.value());
  PG_RETURN_IF_ERROR(check.Check("expert_offsets", a.expert_offsets, DType::kI32, {&offsets}));
  PG_RETURN_IF_ERROR(check.Check("sorted_assignments", a.sorted_assignments, DType::kI32, {&assignments}));
  const Dim experts("E", offsets.value() - 1);
  PG_RETURN_IF_ERROR(CheckExperts(check, experts));
  PG_RETURN_IF_ERROR(check.Require(assignments.value() <= kMaxInt, "N * K < 2^31"));

  kernels::MoeAlignParams p;
  p.topk_ids = a.topk_ids.as<const int32_t>();
  p.expert_offsets = a.expert_offsets.as<int32_t>();
  p.sorted_assignments = a.sorted_assignments.as<int32_t>();
  p.num_assignments = static_cast<int>(assignments.value());
  p.num_experts = static_cast<int>(experts.value());
  *out = p;
  return Status::Ok();
}

}  // namespace

Status MoeRoute(const MoeRouteArgs& a, cudaStream_t stream) {
  kernels::MoeRouteParams p;
  PG_RETURN_IF_ERROR(RouteParams(a, &p));
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchMoeRoute(p, stream));
  return Status::Ok();
}

Status MoeAlign(const MoeAlignArgs& a, cudaStream_t stream) {
  kernels::MoeAlignParams p;
  PG_RETURN_IF_ERROR(AlignParams(a, &p));
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchMoeAlign(p, stream));
  return Status::Ok();
}

Status MoeRouteAndAlign(const MoeRouteArgs& route, const MoeAlignArgs& align, cudaStream_t stream) {
  kernels::MoeRouteParams r;
  kernels::MoeAlignParams a;
  PG_RETURN_IF_ERROR(RouteParams(route, &r));
  PG_RETURN_IF_ERROR(AlignParams(align, &a));
  PG_RETURN_IF_ERROR(TensorChecker("moe_route_and_align")
                         .Require(align.topk_ids.data == route.topk_ids.data &&
                                      align.topk_ids.shape == route.topk_ids.shape,
                                  "align.topk_ids must be route.topk_ids"));
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchMoeRouteAlign(r, a, stream));
  return Status::Ok();
}

Status MoeGateUp(const MoeGateUpArgs& a, cudaStream_t stream) {
  TensorChecker check("moe_gate_up");
  Dim tokens("N"), dim("D"), assignments("N*K"), offsets("E+1"), experts("E"), inter("I");
  PG_RETURN_IF_ERROR(check.Check("x", a.x, DType::kBF16, {&tokens, &dim}));
  PG_RETURN_IF_ERROR(check.Check("sorted_assignments", a.sorted_assignments, DType::kI32, {&assignments}));
  PG_RETURN_IF_ERROR(check.Check("expert_offsets", a.expert_offsets, DType::kI32, {&offsets}));
  PG_RETURN_IF_ERROR(check.Require(dim.value() % 32 == 0 && dim.value() > 0, "D a positive multiple of 32"));
  PG_RETURN_IF_ERROR(CheckMatrix(check, "w1", a.w1, a.format, experts, inter, dim));
  PG_RETURN_IF_ERROR(CheckMatrix(check, "w3", a.w3, a.format, experts, inter, dim));
  PG_RETURN_IF_ERROR(check.Check("h", a.h, DType::kBF16, {&assignments, &inter}));
  PG_RETURN_IF_ERROR(check.Require(offsets.value() == experts.value() + 1, "expert_offsets of E + 1"));
  PG_RETURN_IF_ERROR(CheckExperts(check, experts));
  PG_RETURN_IF_ERROR(check.Require(inter.value() % 32 == 0, "I a multiple of 32"));
  PG_RETURN_IF_ERROR(check.Require(tokens.value() > 0 && assignments.value() % tokens.value() == 0,
                                   "N * K assignments for N tokens"));
  PG_RETURN_IF_ERROR(check.Require(assignments.value() <= kMaxInt && dim.value() <= kMaxInt && inter.value() <= kMaxInt,
                                   "sizes within the kernel's index range"));

  kernels::MoeExpertGemmParams p;
  p.x = a.x.data;
  p.input_row_divisor = static_cast<int>(assignments.value() / tokens.value());
  p.w_a = a.w1.weight.data;
  p.scale_a = a.w1.scale.as<const uint8_t>();
  p.w_b = a.w3.weight.data;
  p.scale_b = a.w3.scale.as<const uint8_t>();
  p.expert_offsets = a.expert_offsets.as<const int32_t>();
  p.sorted_assignments = a.sorted_assignments.as<const int32_t>();
  p.out = a.h.data;
  p.num_experts = static_cast<int>(experts.value());
  p.out_dim = static_cast<int>(inter.value());
  p.in_dim = static_cast<int>(dim.value());
  p.swiglu_limit = a.swiglu_limit;
  p.format = a.format;
  p.num_ctas = a.num_ctas;
  p.batch_invariant = a.batch_invariant;
  p.mxfp4_kernel = a.mxfp4_kernel;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchMoeGateUp(p, stream));
  return Status::Ok();
}

Status MoeDown(const MoeDownArgs& a, cudaStream_t stream) {
  TensorChecker check("moe_down");
  Dim assignments("N*K"), inter("I"), offsets("E+1"), experts("E"), dim("D");
  PG_RETURN_IF_ERROR(check.Check("h", a.h, DType::kBF16, {&assignments, &inter}));
  PG_RETURN_IF_ERROR(check.Check("sorted_assignments", a.sorted_assignments, DType::kI32, {&assignments}));
  PG_RETURN_IF_ERROR(check.Check("expert_offsets", a.expert_offsets, DType::kI32, {&offsets}));
  PG_RETURN_IF_ERROR(check.Require(inter.value() % 32 == 0 && inter.value() > 0, "I a positive multiple of 32"));
  PG_RETURN_IF_ERROR(CheckMatrix(check, "w2", a.w2, a.format, experts, dim, inter));
  PG_RETURN_IF_ERROR(check.Check("y", a.y, DType::kF32, {&assignments, &dim}));
  PG_RETURN_IF_ERROR(check.Require(offsets.value() == experts.value() + 1, "expert_offsets of E + 1"));
  PG_RETURN_IF_ERROR(CheckExperts(check, experts));
  PG_RETURN_IF_ERROR(check.Require(dim.value() % 32 == 0, "D a multiple of 32"));
  PG_RETURN_IF_ERROR(check.Require(assignments.value() <= kMaxInt && inter.value() <= kMaxInt,
                                   "sizes within the kernel's index range"));

  kernels::MoeExpertGemmParams p;
  p.x = a.h.data;
  p.input_row_divisor = 1;
  p.w_a = a.w2.weight.data;
  p.scale_a = a.w2.scale.as<const uint8_t>();
  p.w_b = nullptr;
  p.scale_b = nullptr;
  p.expert_offsets = a.expert_offsets.as<const int32_t>();
  p.sorted_assignments = a.sorted_assignments.as<const int32_t>();
  p.out = a.y.data;
  p.num_experts = static_cast<int>(experts.value());
  p.out_dim = static_cast<int>(dim.value());
  p.in_dim = static_cast<int>(inter.value());
  p.format = a.format;
  p.num_ctas = a.num_ctas;
  p.batch_invariant = a.batch_invariant;
  p.mxfp4_kernel = a.mxfp4_kernel;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchMoeDown(p, stream));
  return Status::Ok();
}

Status MoeCombine(const MoeCombineArgs& a, cudaStream_t stream) {
  TensorChecker check("moe_combine");
  Dim tokens("N"), top_k("K"), dim("D");
  PG_RETURN_IF_ERROR(check.Check("topk_ids", a.topk_ids, DType::kI32, {&tokens, &top_k}));
  PG_RETURN_IF_ERROR(check.Check("topk_weights", a.topk_weights, DType::kF32, {&tokens, &top_k}));
  Dim assignments("N*K", tokens.value() * top_k.value());
  PG_RETURN_IF_ERROR(check.Check("y", a.y, DType::kF32, {&assignments, &dim}));
  PG_RETURN_IF_ERROR(check.CheckOptional("shared", a.shared, DType::kBF16, {&tokens, &dim}));
  PG_RETURN_IF_ERROR(check.Check("out", a.out, DType::kBF16, {&tokens, &dim}));
  PG_RETURN_IF_ERROR(check.Require(dim.value() % 8 == 0 && dim.value() <= kMaxInt, "D a multiple of 8"));
  PG_RETURN_IF_ERROR(check.Require(tokens.value() <= kMaxInt && top_k.value() <= kernels::kMoeMaxTopK,
                                   "N < 2^31, K <= 16"));

  kernels::MoeCombineParams p;
  p.y = a.y.as<const float>();
  p.topk_weights = a.topk_weights.as<const float>();
  p.topk_ids = a.topk_ids.as<const int32_t>();
  p.shared = a.shared.data;
  p.out = a.out.data;
  p.num_tokens = static_cast<int>(tokens.value());
  p.top_k = static_cast<int>(top_k.value());
  p.dim = static_cast<int>(dim.value());
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchMoeCombine(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
