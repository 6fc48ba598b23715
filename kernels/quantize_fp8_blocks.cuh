// Weight quantisation to the checkpoint's dense FP8 format: e4m3 codes with one power-of-two
// f32 scale per 128x128 block (partial edge blocks included),
//   s = 2^ceil(log2(max(amax, 1e-4) / 448)),   q = e4m3_rn_satfinite(w / s)
// -- the rule tools/convert_to_official.py and the release's UE8M0 scales follow, so
// q * s is exact in f32 and w / s is an exact division. Used at load for bf16/f32
// checkpoints and synthetic weights. One CTA per block, two passes over it; no allocation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct QuantizeFp8BlocksParams {
  const void* w = nullptr;  // [rows, cols] bf16
  uint8_t* q = nullptr;     // [rows, cols] e4m3
  float* scale = nullptr;   // [ceil(rows / 128), ceil(cols / 128)] f32
  int64_t rows = 0;
  int64_t cols = 0;
};

cudaError_t LaunchQuantizeFp8Blocks(const QuantizeFp8BlocksParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
