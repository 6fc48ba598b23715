// Interleaved (GPT-J) rotary embedding on the trailing `rope_dim` values of each row, in
// place: pair i of the rope slice, (2i, 2i+1), rotates by the angle whose cos/sin are
// table[position][i]; `inverse` rotates by the negative angle. fp32 math.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/element_type.h"

namespace peregrine::kernels {

struct RopeParams {
  void* x;                   // [rows, n] type, rotated in place
  const int32_t* positions;  // [rows / rows_per_position]
  const float* cos;          // [num_positions, rope_dim / 2]
  const float* sin;          // [num_positions, rope_dim / 2]
  int64_t rows = 0;
  int n = 0;
  int rope_dim = 0;           // even, <= n
  int rows_per_position = 1;  // e.g. the head count when rows are [T * H]
  int num_positions = 0;      // rows whose position is outside [0, num_positions) are left as they are
  bool inverse = false;
  ElementType type = ElementType::kF32;
};

cudaError_t LaunchRope(const RopeParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
