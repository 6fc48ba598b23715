#include "kernels/moe_grouped_gemm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/streaming_load.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/moe_grouped_gemm_mma.cuh"
#include "kernels/moe_router.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
// Two CTAs (16 warps) per SM keep enough weight bytes in flight; caps registers at 128.
constexpr int kMinCtasPerSm = 2;
// 16-byte weight chunks each lane has in flight per matrix before it does any math.
constexpr int kUnrollBF16 = 4;  // 8 inputs per chunk
// Down keeps 4 as well: 8 in flight (a whole I = 2048 row per round trip) measured 4-11% slower
// on the H200 at batch 1-128 (bench/moe/NOTES.md).
constexpr int kUnrollBF16Down = 4;
constexpr int kUnrollMxfp4 = 4;  // 32 inputs (one scale block) per chunk

__device__ __forceinline__ void UnpackBF16x8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Eight e2m1 values (element i in bits 4i..4i+3) as floats times 2^-14: the 3 magnitude bits
// placed at the bottom of an fp16 exponent make an exact fp16 (the e2m1 subnormal 0.5 becomes
// the fp16 subnormal 2^-15), converted two at a time.
__device__ __forceinline__ void DequantE2M1x8(uint32_t word, float (&q)[8]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t v = word >> (4 * s);  // elements s (low half) and s + 4 (high half)
    const uint32_t bits = ((v & 0x00070007u) << 9) | ((v & 0x00080008u) << 12);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&bits));
    q[s] = f.x;
    q[s + 4] = f.y;
  }
}

// 2^(s - 127) for a ue8m0 scale byte, times the 2^14 that DequantE2M1x8 leaves out.
__device__ __forceinline__ float Mxfp4Scale(uint32_t s) {
  if (s == 255u) return __int_as_float(0x7fc00000);  // ue8m0 NaN
  const uint32_t field = s + 14u;
  return field <= 254u ? __uint_as_float(field << 23) : INFINITY;
}

// acc_a[t] (+ acc_b[t]) += this lane's share of x[t] . row, bf16 weights.
template <bool kGateUp, int kN>
__device__ __forceinline__ void RowDotBF16(const MoeExpertGemmParams& p, int64_t w_row,
                                           const __nv_bfloat16* const (&x)[kN], float (&acc_a)[kN],
                                           float (&acc_b)[kN], int lane) {
  const int chunks = p.in_dim / 8;
  const uint4* wa = static_cast<const uint4*>(p.w_a) + w_row * chunks;
  const uint4* wb = kGateUp ? static_cast<const uint4*>(p.w_b) + w_row * chunks : nullptr;
  constexpr int kUnroll = kGateUp ? kUnrollBF16 : kUnrollBF16Down;
  for (int c0 = lane; c0 < chunks; c0 += kWarpSize * kUnroll) {
    uint4 va[kUnroll] = {}, vb[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarpSize;
      if (c < chunks) {
        va[u] = LoadStreaming16(wa + c);
        if constexpr (kGateUp) vb[u] = LoadStreaming16(wb + c);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarpSize;
      if (c >= chunks) break;
      float fa[8], fb[8];
      UnpackBF16x8(va[u], fa);
      if constexpr (kGateUp) UnpackBF16x8(vb[u], fb);
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        float fx[8];
        UnpackBF16x8(__ldg(reinterpret_cast<const uint4*>(x[t]) + c), fx);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          acc_a[t] = fmaf(fa[i], fx[i], acc_a[t]);
          if constexpr (kGateUp) acc_b[t] = fmaf(fb[i], fx[i], acc_b[t]);
        }
      }
    }
  }
}

// The same for MXFP4 weights: one 16-byte chunk is one 32-input scale block, so the block's
// partial sum is scaled once.
template <bool kGateUp, int kN>
__device__ __forceinline__ void RowDotMxfp4(const MoeExpertGemmParams& p, int64_t w_row,
                                            const __nv_bfloat16* const (&x)[kN], float (&acc_a)[kN],
                                            float (&acc_b)[kN], int lane) {
  const int chunks = p.in_dim / 32;
  const uint4* wa = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.w_a) + w_row * (p.in_dim / 2));
  const uint4* wb =
      kGateUp ? reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.w_b) + w_row * (p.in_dim / 2))
              : nullptr;
  const uint8_t* sa = p.scale_a + w_row * chunks;
  const uint8_t* sb = kGateUp ? p.scale_b + w_row * chunks : nullptr;
  for (int c0 = lane; c0 < chunks; c0 += kWarpSize * kUnrollMxfp4) {
    uint4 va[kUnrollMxfp4] = {}, vb[kUnrollMxfp4] = {};
    uint32_t scale_a[kUnrollMxfp4] = {}, scale_b[kUnrollMxfp4] = {};
#pragma unroll
    for (int u = 0; u < kUnrollMxfp4; ++u) {
      const int c = c0 + u * kWarpSize;
      if (c < chunks) {
        va[u] = LoadStreaming16(wa + c);
        scale_a[u] = __ldg(sa + c);
        if constexpr (kGateUp) {
          vb[u] = LoadStreaming16(wb + c);
          scale_b[u] = __ldg(sb + c);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnrollMxfp4; ++u) {
      const int c = c0 + u * kWarpSize;
      if (c >= chunks) break;
      float part_a[kN] = {}, part_b[kN] = {};
      const uint32_t words_a[4] = {va[u].x, va[u].y, va[u].z, va[u].w};
      const uint32_t words_b[4] = {vb[u].x, vb[u].y, vb[u].z, vb[u].w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float qa[8], qb[8];
        DequantE2M1x8(words_a[w], qa);
        if constexpr (kGateUp) DequantE2M1x8(words_b[w], qb);
#pragma unroll
        for (int t = 0; t < kN; ++t) {
          float fx[8];
          UnpackBF16x8(__ldg(reinterpret_cast<const uint4*>(x[t]) + c * 4 + w), fx);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            part_a[t] = fmaf(qa[i], fx[i], part_a[t]);
            if constexpr (kGateUp) part_b[t] = fmaf(qb[i], fx[i], part_b[t]);
          }
        }
      }
      const float sa_f = Mxfp4Scale(scale_a[u]);
      const float sb_f = kGateUp ? Mxfp4Scale(scale_b[u]) : 0.0f;
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        acc_a[t] = fmaf(part_a[t], sa_f, acc_a[t]);
        if constexpr (kGateUp) acc_b[t] = fmaf(part_b[t], sb_f, acc_b[t]);
      }
    }
  }
}

// One output row of expert e for kN consecutive entries of its assignment list, from `first`.
template <MoeWeightFormat kFormat, bool kGateUp, int kN>
__device__ __noinline__ void ExpertRow(const MoeExpertGemmParams& p, int e, int row, int first, int lane) {
  const __nv_bfloat16* x[kN];
  int32_t assignment[kN];
#pragma unroll
  for (int t = 0; t < kN; ++t) {
    assignment[t] = p.sorted_assignments[first + t];
    x[t] = static_cast<const __nv_bfloat16*>(p.x) +
           static_cast<int64_t>(assignment[t] / p.input_row_divisor) * p.in_dim;
  }
  float acc_a[kN] = {}, acc_b[kN] = {};
  const int64_t w_row = static_cast<int64_t>(e) * p.out_dim + row;
  if constexpr (kFormat == MoeWeightFormat::kBF16) {
    RowDotBF16<kGateUp, kN>(p, w_row, x, acc_a, acc_b, lane);
  } else {
    RowDotMxfp4<kGateUp, kN>(p, w_row, x, acc_a, acc_b, lane);
  }
#pragma unroll
  for (int t = 0; t < kN; ++t) {
    const float g = WarpSum(acc_a[t]);
    const float u = kGateUp ? WarpSum(acc_b[t]) : 0.0f;
    if (lane != t) continue;  // spread the scattered stores over lanes
    const int64_t out = static_cast<int64_t>(assignment[t]) * p.out_dim + row;
    if constexpr (kGateUp) {
      float gate = g, up = u;
      const float limit = p.swiglu_limit;
      if (limit > 0.0f) {
        gate = fminf(gate, limit);
        up = fminf(fmaxf(up, -limit), limit);
      }
      const float silu = gate / (1.0f + expf(-gate));
      static_cast<__nv_bfloat16*>(p.out)[out] = __float2bfloat16_rn(silu * up);
    } else {
      static_cast<float*>(p.out)[out] = g;
    }
  }
}

template <MoeWeightFormat kFormat, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) MoeExpertGemmKernel(const MoeExpertGemmParams p) {
  StartAfterPredecessor();
  __shared__ int touched[kMoeMaxExperts];  // the experts with assignments, ascending
  __shared__ int warp_counts[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;

  const int num_touched = moe_mma::CollectTouchedExperts(p, touched, warp_counts, kThreads);

  // Items are (touched expert, output row); neighbouring warps take neighbouring rows of one
  // expert, so they share its activations in L1.
  const int64_t num_items = static_cast<int64_t>(num_touched) * p.out_dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp; item < num_items; item += stride) {
    const int slot = static_cast<int>(item / p.out_dim);
    const int row = static_cast<int>(item - static_cast<int64_t>(slot) * p.out_dim);
    const int e = touched[slot];
    const int begin = p.expert_offsets[e];
    const int end = p.expert_offsets[e + 1];
    for (int first = begin; first < end; first += kMoeTokenGroup) {
      switch (min(end - first, kMoeTokenGroup)) {
        case 1: ExpertRow<kFormat, kGateUp, 1>(p, e, row, first, lane); break;
        case 2: ExpertRow<kFormat, kGateUp, 2>(p, e, row, first, lane); break;
        case 3: ExpertRow<kFormat, kGateUp, 3>(p, e, row, first, lane); break;
        default: ExpertRow<kFormat, kGateUp, kMoeTokenGroup>(p, e, row, first, lane); break;
      }
    }
  }
}

template <MoeWeightFormat kFormat, bool kGateUp>
cudaError_t LaunchTyped(const MoeExpertGemmParams& p, cudaStream_t stream) {
  const auto kernel = MoeExpertGemmKernel<kFormat, kGateUp>;
  int num_ctas = p.num_ctas;
  if (num_ctas <= 0) {
    // Host queries only (no stream work), so this is legal inside a capture.
    int device = 0, num_sms = 0, per_sm = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error == cudaSuccess) error = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
    if (error == cudaSuccess) error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
    if (error != cudaSuccess) return error;
    num_ctas = num_sms * (per_sm > 0 ? per_sm : 1);
  }
  return LaunchDependent(kernel, LaunchShape{dim3(num_ctas), dim3(kThreads)}, stream, p);
}

// The tensor-core MXFP4 kernel (moe_grouped_gemm_mma.cuh) serves whole items (16 rows for
// gate-up, 32 for down) on sm_80+ devices that can give one CTA its table and weight rings
// (~210 KiB: H100/H200; not A100 or sm_86/89); anything else takes the CUDA-core kernel.
template <bool kGateUp>
cudaError_t UseMxfp4Mma(const MoeExpertGemmParams& p, bool& use) {
  use = false;
  if (p.format != MoeWeightFormat::kMxfp4 || p.out_dim % moe_mma::kItemRows<kGateUp> != 0) return cudaSuccess;
  if (p.mxfp4_kernel == MoeMxfp4Kernel::kCudaCore) return cudaSuccess;
  // The kernel's item arithmetic is 32-bit.
  constexpr int64_t kMaxItems = int64_t{1} << 30;
  if (static_cast<int64_t>(p.out_dim / moe_mma::kRows) * kMoeMaxExperts >= kMaxItems ||
      static_cast<int64_t>(p.num_ctas) * moe_mma::kWarps >= kMaxItems)
    return cudaSuccess;
  int device = 0, major = 0, smem_optin = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  use = error == cudaSuccess && major >= 8 &&
        smem_optin >= moe_mma::kDynamicSmemBytes +
                          static_cast<int>(sizeof(int)) * (kMoeMaxExperts + moe_mma::kWarps);
  return error;
}

template <bool kGateUp, bool kWholeStages>
cudaError_t LaunchMxfp4Mma(const MoeExpertGemmParams& p, cudaStream_t stream) {
  const auto kernel = moe_mma::MoeMxfp4MmaKernel<kGateUp, kWholeStages>;
  constexpr int kSmem = moe_mma::kDynamicSmemBytes;
  // Host-side attribute and queries only (no stream work), so this is legal inside a capture.
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (error != cudaSuccess) return error;
  int num_ctas = p.num_ctas;
  if (num_ctas <= 0) {
    int device = 0, num_sms = 0, per_sm = 0;
    error = cudaGetDevice(&device);
    if (error == cudaSuccess) error = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
    if (error == cudaSuccess)
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, moe_mma::kThreads, kSmem);
    if (error != cudaSuccess) return error;
    num_ctas = num_sms * (per_sm > 0 ? per_sm : 1);
  }
  return LaunchDependent(kernel, LaunchShape{dim3(num_ctas), dim3(moe_mma::kThreads), kSmem}, stream, p);
}

// Rows stream in whole multi-step stages (with their scales) when in_dim divides into them.
template <bool kGateUp>
cudaError_t LaunchMxfp4Mma(const MoeExpertGemmParams& p, cudaStream_t stream) {
  constexpr int kStageInputs = moe_mma::kStepInputs * moe_mma::kStageSteps<true>;
  return p.in_dim % kStageInputs == 0 ? LaunchMxfp4Mma<kGateUp, true>(p, stream)
                                      : LaunchMxfp4Mma<kGateUp, false>(p, stream);
}

cudaError_t Validate(const MoeExpertGemmParams& p) {
  if (p.num_experts <= 0 || p.num_experts > kMoeMaxExperts || p.out_dim <= 0 || p.in_dim <= 0 ||
      p.in_dim % 32 != 0 || p.input_row_divisor <= 0)
    return cudaErrorInvalidValue;
  if (p.format == MoeWeightFormat::kMxfp4 && p.scale_a == nullptr) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchMoeGateUp(const MoeExpertGemmParams& p, cudaStream_t stream) {
  if (const cudaError_t error = Validate(p); error != cudaSuccess) return error;
  if (p.w_b == nullptr || (p.format == MoeWeightFormat::kMxfp4 && p.scale_b == nullptr)) return cudaErrorInvalidValue;
  bool mma = false;
  if (const cudaError_t error = UseMxfp4Mma<true>(p, mma); error != cudaSuccess) return error;
  if (mma) return LaunchMxfp4Mma<true>(p, stream);
  switch (p.format) {
    case MoeWeightFormat::kBF16: return LaunchTyped<MoeWeightFormat::kBF16, true>(p, stream);
    case MoeWeightFormat::kMxfp4: return LaunchTyped<MoeWeightFormat::kMxfp4, true>(p, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchMoeDown(const MoeExpertGemmParams& p, cudaStream_t stream) {
  if (const cudaError_t error = Validate(p); error != cudaSuccess) return error;
  bool mma = false;
  if (const cudaError_t error = UseMxfp4Mma<false>(p, mma); error != cudaSuccess) return error;
  if (mma) return LaunchMxfp4Mma<false>(p, stream);
  switch (p.format) {
    case MoeWeightFormat::kBF16: return LaunchTyped<MoeWeightFormat::kBF16, false>(p, stream);
    case MoeWeightFormat::kMxfp4: return LaunchTyped<MoeWeightFormat::kMxfp4, false>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace peregrine::kernels
