#include "backend/cuda/ops/swiglu.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/swiglu.cuh"

namespace peregrine::cuda {

Status SwigluClamp(const SwigluArgs& a, cudaStream_t stream) {
  TensorChecker check("swiglu_clamp");
  Dim n("N"), two_i("2I"), i("I");
  PG_RETURN_IF_ERROR(check.Check("gate_up", a.gate_up, DType::kBF16, {&n, &two_i}));
  PG_RETURN_IF_ERROR(check.Require(two_i.value() % 2 == 0, "gate_up width even (gate | up)"));
  i.Bind(two_i.value() / 2);
  PG_RETURN_IF_ERROR(check.Check("h", a.h, DType::kBF16, {&n, &i}));

  kernels::SwigluParams p;
  p.gate_up = a.gate_up.data;
  p.h = a.h.data;
  p.num_tokens = n.value();
  p.inter = i.value();
  p.limit = a.limit;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchSwiglu(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
