// SwiGLU with DeepSeek-V4's clamps (as the CPU Expert): h = SiLU(min(g, limit)) *
// clamp(u, -limit, limit), limit <= 0 disabling the clamp. Gate and up come as one fused
// [N, 2I] tensor, gate first: the layout of a single GEMM over w1 and w3 stacked by rows.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct SwigluArgs {
  Tensor gate_up;  // [N, 2I] bf16: columns [0, I) gate, [I, 2I) up
  Tensor h;        // [N, I] bf16 out
  float limit = 0.0f;
};

// InvalidArgument (naming the tensor) for bad shapes, dtypes, devices or alignment; Internal
// when the launch fails. Asynchronous on `stream`, capture-safe.
Status SwigluClamp(const SwigluArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
