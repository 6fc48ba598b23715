// Routed-expert weights quantised to MXFP4 on the device at load (kernels/quantize_mxfp4.cuh),
// bit for bit the host's QuantizeMxfp4.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct QuantizeMxfp4Args {
  Tensor w;       // [R, C] bf16, C a multiple of 32, 16-byte aligned
  Tensor codes;   // [R, C / 2] u8
  Tensor scales;  // [R, C / 32] u8
};

// InvalidArgument naming the tensor on bad arguments. Asynchronous on `stream`.
Status QuantizeMxfp4(const QuantizeMxfp4Args& args, cudaStream_t stream);

}  // namespace peregrine::cuda
