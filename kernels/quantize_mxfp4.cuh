// Weight quantisation to the release's routed-expert format, MXFP4: per 32 consecutive
// inputs of a row one UE8M0 exponent byte and 32 e2m1 codes (two per byte, the low nibble the
// even column),
//   s = 2^ceil(log2(max(amax, 1e-4) / 6)),   code = the nearest e2m1 value of w / s (ties to
//   the even code)
// -- bit for bit the host's QuantizeMxfp4 (src/model/dequant.h), which the GPU test checks.
// Used at load for bf16 checkpoints. One thread per 32-input group; no allocation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct QuantizeMxfp4Params {
  const void* w = nullptr;    // [rows, cols] bf16, 16-byte aligned rows
  uint8_t* codes = nullptr;   // [rows, cols / 2]
  uint8_t* scales = nullptr;  // [rows, cols / 32] biased exponents
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of 32
};

cudaError_t LaunchQuantizeMxfp4(const QuantizeMxfp4Params& p, cudaStream_t stream);

}  // namespace peregrine::kernels
