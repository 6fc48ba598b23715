// Deterministic random device fills for synthetic weights (kernels/random_fill.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

// Uniform values in [lo, hi) into a bf16 or f32 tensor; element i depends only on (seed, i).
Status RandomUniform(const Tensor& t, uint64_t seed, float lo, float hi, cudaStream_t stream);
// Uniform integers in [lo, hi] into a u8/i8/e2m1/ue8m0 tensor's bytes.
Status RandomBytes(const Tensor& t, uint64_t seed, int lo, int hi, cudaStream_t stream);

}  // namespace peregrine::cuda
