// The weighted combine of one token's expert outputs over eight columns, shared by
// MoeCombineKernel (moe_router.cu) and the mHC expansion that fuses it (hyper_connection.cu),
// so both round the same sums: sum_k w[k] * y[k] (fp32, k ascending, fused multiply-adds)
// plus the shared expert's bf16 row, rounded to bf16 once.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/warp.cuh"

namespace peregrine::kernels {

// Token t's columns [c, c + 8) of the combined output, as packed bf16 pairs. Assignments with
// a negative id are skipped; `shared` may be null.
__device__ __forceinline__ uint4 CombineEight(const float* y, const float* topk_weights, const int32_t* topk_ids,
                                              const void* shared, int top_k, int dim, int64_t t, int c) {
  float acc[8] = {};
  for (int k = 0; k < top_k; ++k) {
    const int64_t a = t * top_k + k;
    if (topk_ids[a] < 0) continue;
    const float w = topk_weights[a];
    const float4* row = reinterpret_cast<const float4*>(y + a * dim + c);
    const float4 lo = row[0], hi = row[1];
    acc[0] = __fmaf_rn(w, lo.x, acc[0]), acc[1] = __fmaf_rn(w, lo.y, acc[1]);
    acc[2] = __fmaf_rn(w, lo.z, acc[2]), acc[3] = __fmaf_rn(w, lo.w, acc[3]);
    acc[4] = __fmaf_rn(w, hi.x, acc[4]), acc[5] = __fmaf_rn(w, hi.y, acc[5]);
    acc[6] = __fmaf_rn(w, hi.z, acc[6]), acc[7] = __fmaf_rn(w, hi.w, acc[7]);
  }
  if (shared != nullptr) {
    const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(shared) + t * dim + c);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(h[j]);
      acc[2 * j] = __fadd_rn(acc[2 * j], f.x);
      acc[2 * j + 1] = __fadd_rn(acc[2 * j + 1], f.y);
    }
  }
  uint4 out;
  out.x = PackBF16x2(acc[0], acc[1]);
  out.y = PackBF16x2(acc[2], acc[3]);
  out.z = PackBF16x2(acc[4], acc[5]);
  out.w = PackBF16x2(acc[6], acc[7]);
  return out;
}

}  // namespace peregrine::kernels
