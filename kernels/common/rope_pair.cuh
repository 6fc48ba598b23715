// One interleaved RoPE pair rotation, shared by the RoPE kernel and the RMSNorm kernel that
// fuses it, so both give the same bits. Products and sums are rounded separately (no fused
// multiply-add), as the CPU backend computes them.
#pragma once

namespace peregrine::kernels {

// (x0, x1) rotated by the angle with cosine c and sine s.
__device__ __forceinline__ float2 RotatePair(float x0, float x1, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
}

}  // namespace peregrine::kernels
