// The dense FP8 projection for decode-sized batches, W8A16: y = x . (w * scale)^T with bf16
// activations as they are, e4m3 weights with one f32 scale per 128x128 block dequantised in
// registers, fp32 accumulation (kernels/fp8_w8a16.cuh has the design). Any N (tokens are
// tiled 8 or 16 per CTA, so the weights are read once per 16 tokens: meant for N <= 64;
// Fp8Projection picks it or the cuBLASLt path). Also the load-time quantiser producing that
// weight format. Neither allocates; both can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct Fp8W8A16Args {
  Tensor x;        // [N, K] bf16; K a positive multiple of 64, any N >= 0
  Tensor w;        // [M, K] f8e4m3; any M >= 1
  Tensor w_scale;  // [ceil(M / 128), ceil(K / 128)] f32
  Tensor y;        // [N, M] bf16 or f32
};

// InvalidArgument naming the tensor for a bad shape, dtype, device or alignment (16 bytes for
// x and w). Asynchronous on `stream`; writes y only. The split of K over CTAs depends on M, K
// and the device's SM count only, so a token's output does not depend on N or its batch mates.
Status Fp8W8A16Linear(const Fp8W8A16Args& args, cudaStream_t stream);

struct QuantizeFp8BlocksArgs {
  Tensor w;      // [M, K] bf16
  Tensor q;      // [M, K] f8e4m3
  Tensor scale;  // [ceil(M / 128), ceil(K / 128)] f32, powers of two
};

// q = e4m3(w / s) with s = 2^ceil(log2(max(amax, 1e-4) / 448)) per 128x128 block
// (kernels/quantize_fp8_blocks.cuh). InvalidArgument naming the tensor on bad arguments.
Status QuantizeFp8Blocks(const QuantizeFp8BlocksArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
