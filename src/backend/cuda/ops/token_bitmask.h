// Launcher of kernels/token_bitmask.cuh: grammar masks on logits rows before sampling.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct TokenBitmaskArgs {
  Tensor logits;    // [R, V] f32, edited in place
  Tensor masks;     // [M, W] i32 holding 32-bit masks (W >= ceil(V / 32)); bit id % 32 of word id / 32: allowed
  Tensor row_mask;  // [R] i32: the row's mask in masks, or < 0 for none
};

Status ApplyTokenBitmask(const TokenBitmaskArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
