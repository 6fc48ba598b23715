// Deterministic random fills on the device, for synthetic weights: every element is a pure
// function of (seed, index), so a tensor is the same whatever the grid, and generating a
// V4-Flash-sized checkpoint takes a memory-bandwidth-bound pass instead of host work.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/element_type.h"

namespace peregrine::kernels {

enum class RandomFillKind : uint8_t {
  kUniform,  // float in [lo, hi), stored as bf16 or f32
  kBytes,    // uint8 in [lo, hi] (integer bounds): packed e2m1 pairs, ue8m0 scales
};

struct RandomFillParams {
  void* data;       // [n] elements of `type` (kUniform) or bytes (kBytes)
  int64_t n = 0;
  uint64_t seed = 0;
  float lo = 0.0f;
  float hi = 1.0f;
  RandomFillKind kind = RandomFillKind::kUniform;
  ElementType type = ElementType::kBF16;
};

cudaError_t LaunchRandomFill(const RandomFillParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
