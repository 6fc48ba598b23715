// y = x . w^T with FP8 e4m3 weights in 128x128 blocks (the checkpoint's dense projections)
// and activations quantised on the fly per token and 128-element group (DeepSeek's
// act_quant), through cuBLASLt's block-scaled FP8 GEMM on Hopper (fp32 accumulation; the
// scales are applied per K-block inside the kernel). Never allocates device memory: the
// quantised activations live in a caller-provided workspace and cuBLASLt uses the Blas
// workspace, so a call can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/blas.h"
#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct QuantizeFp8Args {
  Tensor x;      // [N, K] bf16, K a multiple of 128
  Tensor x_q;    // [N, K] f8e4m3
  Tensor scale;  // [N, K / 128] f32: x[t, 128 g + i] ~= e4m3(x_q[t, 128 g + i]) * scale[t, g]
  bool pow2_scales = false;  // round each scale up to a power of two (DeepSeek's ue8m0 format)
};

// The activation quantisation alone (kernels/quantize_fp8.cuh has the exact rounding).
// InvalidArgument naming the tensor on a bad shape, dtype, device or alignment.
Status QuantizeFp8(const QuantizeFp8Args& args, cudaStream_t stream);

struct Fp8LinearArgs {
  Tensor x;          // [N, K] bf16; K a multiple of 128, any N >= 0
  Tensor w;          // [M, K] f8e4m3; M a multiple of 128
  Tensor w_scale;    // [M / 128, K / 128] f32 (ue8m0 checkpoint scales converted once at load)
  Tensor y;          // [N, M] bf16 or f32
  Tensor workspace;  // [>= Fp8LinearWorkspaceBytes(N, K, M)] u8, 256-byte aligned
  bool pow2_scales = false;  // as QuantizeFp8Args
};

// Bytes of workspace Fp8Linear needs for these sizes: the quantised x, its scales (in the
// group-major order cuBLASLt reads) and, when K / 128 is not a multiple of 4, a copy of
// w_scale with its rows padded to 4 entries (cuBLASLt's 16-byte row pitch).
size_t Fp8LinearWorkspaceBytes(int64_t n, int64_t k, int64_t m);

// InvalidArgument naming the tensor for a bad shape, dtype, device, alignment or a short
// workspace; Unimplemented when cuBLASLt has no block-scaled FP8 algorithm for the shape
// (anything but sm_90 / cuBLASLt < 12.9); other cuBLAS failures through CublasStatus.
// Asynchronous on `stream`; overwrites the workspace and y, nothing else. The first call
// for a shape queries cuBLASLt's heuristic (host only) and caches the plan in `blas`.
Status Fp8Linear(Blas& blas, const Fp8LinearArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
