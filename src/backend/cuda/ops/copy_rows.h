// Row gather/scatter on the device (kernels/copy_rows.cuh): dst[dst_rows[i]] = src[src_rows[i]].
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct CopyRowsArgs {
  Tensor src;       // [S, W] any dtype, W * element size a multiple of 16 bytes
  Tensor dst;       // [R, W] same dtype
  Tensor src_rows;  // [n] i32, negative = skip the pair
  Tensor dst_rows;  // [n] i32
};

Status CopyRows(const CopyRowsArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
