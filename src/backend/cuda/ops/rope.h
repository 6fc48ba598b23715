// Interleaved RoPE (and its inverse) on the device, in place on the trailing rope dims.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct RopeArgs {
  Tensor x;          // [R, N] bf16 or f32, rotated in place
  Tensor positions;  // [T] i32, R = T * rows_per_position (e.g. T tokens of H heads)
  Tensor cos;        // [num_positions, rope_dim / 2] f32 (host-computed RopeTable angles)
  Tensor sin;        // [num_positions, rope_dim / 2] f32
  int64_t rope_dim = 0;
  bool inverse = false;
};

// Rotates pair i of each row's rope slice by table[positions[row / (R / T)]][i]. Rows whose
// position is outside the table are left unchanged (the launcher cannot see device data).
Status Rope(const RopeArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
