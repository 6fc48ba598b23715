// SwiGLU with DeepSeek-V4's clamps: h = SiLU(min(gate, limit)) * clamp(up, -limit, limit),
// limit <= 0 disabling both. Input is the fused gate/up projection output, gate first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct SwigluParams {
  const void* gate_up;  // [N, 2I] bf16: columns [0, I) gate, [I, 2I) up
  void* h;              // [N, I] bf16
  int64_t num_tokens = 0;
  int64_t inter = 0;  // I
  float limit = 0.0f;
};

cudaError_t LaunchSwiglu(const SwigluParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
