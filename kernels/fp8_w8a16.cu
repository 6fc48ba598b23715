#include "kernels/fp8_w8a16.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/mma.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 32;                      // two m16 tiles per warp
constexpr int kUnitK = kW8A16ScaleBlock;           // K per unit: one scale block
constexpr int kUnitSlots = kUnitK / 16;            // 16-byte weight slots per row and unit
constexpr int kXUnitSlots = kUnitK * 2 / 16;       // 16-byte x slots per token and unit
constexpr int kMaxStages = 6;
constexpr int kMinStages = 2;
static_assert(kW8A16MinK == 64, "a partial unit is one 64-wide half, zero-filled");
static_assert(kW8A16TokensPerCta == 64, "8 n8 tiles per CTA at most");

// Compile-time sizes of one kernel: kNTiles n8 token tiles, kGroups warp groups splitting
// the K units of the CTA (each group's warps split its rows).
//
// Shared memory, one stage per step (kGroups consecutive units, unit q for warp group q):
//   weights [kGroups][kRows][128] e4m3   row r's 16-byte slot s at slot s ^ 4 (r & 1)
//   x       [kGroups][kTokens][128] bf16 token row i's 16-byte slot s at slot s ^ (i & 1)
// The swizzles make each quarter-warp's 16-byte reads (rows or tokens g and g + 1, slots
// t = 0..3 or 2t + half) fall on 8 different bank groups. After the main loop the same
// memory holds the warps' partial sums [kGroups][kTokens][kSumStride] f32.
template <int kNTiles, int kGroups>
struct Tiling {
  static constexpr int kRowWarps = kWarps / kGroups;
  static constexpr int kRows = kWarpRows * kRowWarps;
  static constexpr int kTokens = 8 * kNTiles;
  static constexpr int kWeightUnitBytes = kRows * kUnitK;
  static constexpr int kXUnitBytes = kTokens * kUnitK * 2;
  static constexpr int kXOffset = kGroups * kWeightUnitBytes;
  static constexpr int kStageBytes = kGroups * (kWeightUnitBytes + kXUnitBytes);
  static constexpr int kSumStride = kRows + 4;  // padded: the fragment stores hit 32 banks
  static constexpr int kTileElems = kTokens * kRows;
  static constexpr int kPartialBytes = kGroups * kTokens * kSumStride * 4;
  static_assert(kRows % kW8A16RowsPerCta == 0 && kW8A16ScaleBlock % kWarpRows == 0, "a warp's rows share a scale row");
};

// Two e4m3 codes of `word` (bytes picked by `selector` into the high byte of each half) as a
// bf16x2 of the same values. Moving sign, exponent and mantissa into bf16's fields gives
// value * 2^-120 (e4m3's exponent bias 7 read with bf16's 127; e4m3 subnormals land on bf16
// subnormals), so one exact multiply by 2^120 restores it.
__device__ __forceinline__ uint32_t E4M3PairToBF16(uint32_t word, uint32_t selector) {
  const uint32_t r = __byte_perm(word, 0u, selector);
  uint32_t bits = (r & 0x80008000u) | ((r & 0x7f007f00u) >> 4);
  constexpr uint32_t kTwoPow120 = 0x7b807b80u;  // bf16 2^120 in both halves
  __nv_bfloat162 v, k;
  static_assert(sizeof(v) == 4, "bf16x2 is 4 bytes");
  __builtin_memcpy(&v, &bits, 4);
  __builtin_memcpy(&k, &kTwoPow120, 4);
  v = __hmul2(v, k);
  __builtin_memcpy(&bits, &v, 4);
  return bits;
}
constexpr uint32_t kLowPair = 0x1404;   // bytes 0, 1 -> the high bytes of the two halves
constexpr uint32_t kHighPair = 0x3424;  // bytes 2, 3

// 16 bytes from shared memory; the memory clobber keeps it after the step's barrier.
__device__ __forceinline__ uint4 LoadShared16(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(SmemAddress(p))
               : "memory");
  return v;
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Waits until at most `pending` committed cp.async groups are in flight (0 <= pending <
// kMaxStages - 1; the switch turns the runtime stage count into the instruction's immediate).
__device__ __forceinline__ void CpAsyncWaitPending(int pending) {
  switch (pending) {
    case 0: CpAsyncWait<0>(); break;
    case 1: CpAsyncWait<1>(); break;
    case 2: CpAsyncWait<2>(); break;
    case 3: CpAsyncWait<3>(); break;
    default: CpAsyncWait<4>(); break;
  }
}
static_assert(kMaxStages - 2 <= 4, "CpAsyncWaitPending covers the stage counts");

__device__ __forceinline__ void ClusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();  // never launched: the launcher splits K over CTAs on sm_90 and later only
#endif
}

__device__ __forceinline__ const float* ClusterPeer(const float* smem, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(smem, rank);
#else
  (void)rank;
  return smem;
#endif
}

struct LaunchPlan {
  int cluster = 1;  // CTAs of a cluster splitting a row tile's K units (grid.y)
  int stages = kMinStages;
};

// Issues the cp.async copies of one step (units u_first + q for q < kGroups, unit q for warp
// group q) into `stage`; slots past K, rows past M, tokens past N and units from u_end on are
// zero-filled.
template <int kNTiles, int kGroups>
__device__ __forceinline__ void LoadStep(const Fp8W8A16Params& p, uint8_t* stage, int m0, int64_t n0, int u_first,
                                         int u_end) {
  using T = Tiling<kNTiles, kGroups>;
  const int tid = static_cast<int>(threadIdx.x);
  const int k = p.k;
  const uint8_t* w = p.w;
  const auto* x = static_cast<const __nv_bfloat16*>(p.x);
  // The copy loops stay rolled: unrolled, the compiler keeps every copy's address live
  // across the main loop and the 64-token variants spill.
  constexpr int kWeightCopies = kGroups * T::kRows * kUnitSlots;
  static_assert(kWeightCopies % kThreads == 0, "every thread copies the same number of weight slots");
#pragma unroll 1
  for (int i = 0; i < kWeightCopies / kThreads; ++i) {
    const int e = tid + i * kThreads;
    const int slot = e % kUnitSlots, r = (e / kUnitSlots) % T::kRows, q = e / (kUnitSlots * T::kRows);
    const int u = u_first + q, row = m0 + r;
    const int col = u * kUnitK + slot * 16;  // byte offset in the row
    const bool ok = u < u_end && row < p.m && col < k;
    const uint8_t* src = ok ? w + static_cast<int64_t>(row) * k + col : w;
    CpAsync16(stage + q * T::kWeightUnitBytes + r * kUnitK + ((slot ^ ((r & 1) << 2)) * 16), src, ok);
  }
  constexpr int kXCopies = kGroups * T::kTokens * kXUnitSlots;
#pragma unroll 1
  for (int i = 0; i < (kXCopies + kThreads - 1) / kThreads; ++i) {
    const int e = tid + i * kThreads;
    if (kXCopies % kThreads != 0 && e >= kXCopies) break;
    const int slot = e % kXUnitSlots, token = (e / kXUnitSlots) % T::kTokens, q = e / (kXUnitSlots * T::kTokens);
    const int u = u_first + q;
    const int col = u * kUnitK + slot * 8;  // element offset in the row
    const bool ok = u < u_end && n0 + token < p.n && col < k;
    const __nv_bfloat16* src = ok ? x + (n0 + token) * k + col : x;
    CpAsync16(stage + T::kXOffset + q * T::kXUnitBytes + token * (kUnitK * 2) + ((slot ^ (token & 1)) * 16), src, ok);
  }
}

// The K-index permutation that lets a lane's contiguous bytes feed its MMA fragments: in
// 64-wide half c of a unit, lane (g, t) reads K [16t, 16t + 16) of rows g and g + 8; its
// bytes 4j..4j+3 are MMA k-step j's logical columns {2t, 2t+1} (bytes 0-1) and {2t+8, 2t+9}
// (bytes 2-3). x is read with the same permutation (32 contiguous bytes per lane and token),
// so the dot products are unchanged.
//
// grid = (token tiles of 64, plan.cluster, row tiles); cluster (1, plan.cluster, 1).
template <int kNTiles, int kGroups>
__global__ void __launch_bounds__(kThreads, 1) Fp8W8A16Kernel(const Fp8W8A16Params p, const LaunchPlan plan) {
  using T = Tiling<kNTiles, kGroups>;
  extern __shared__ __align__(16) uint8_t smem[];

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int group = warp / T::kRowWarps;               // which units of a step
  const int warp_row = (warp % T::kRowWarps) * kWarpRows;  // first row of the warp in the tile
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kW8A16TokensPerCta;
  const int m0 = static_cast<int>(blockIdx.z) * T::kRows;
  const int units = (p.k + kUnitK - 1) / kUnitK;  // also the scale table's width
  const int per_cta = (units + plan.cluster - 1) / plan.cluster;
  const int u_begin = static_cast<int>(blockIdx.y) * per_cta;
  const int u_end = min(units, u_begin + per_cta);
  const int steps = u_end > u_begin ? (u_end - u_begin + kGroups - 1) / kGroups : 0;
  const bool has_rows = m0 + warp_row < p.m;
  const float* scale_row = p.scale + static_cast<int64_t>(min(m0 + warp_row, p.m - 1) / kW8A16ScaleBlock) * units;

  for (int s = 0; s < plan.stages - 1; ++s) {
    if (s < steps) LoadStep<kNTiles, kGroups>(p, smem + s * T::kStageBytes, m0, n0, u_begin + s * kGroups, u_end);
    CpAsyncCommit();
  }

  float acc[2][kNTiles][4] = {};
  for (int step = 0; step < steps; ++step) {
    // Groups committed so far: stages - 1 + step; this step's is the oldest still wanted.
    CpAsyncWaitPending(plan.stages - 2);
    __syncthreads();  // the step's copies from every thread have landed; the previous stage is free
    const int next = step + plan.stages - 1;
    if (next < steps)
      LoadStep<kNTiles, kGroups>(p, smem + (next % plan.stages) * T::kStageBytes, m0, n0, u_begin + next * kGroups,
                                 u_end);
    CpAsyncCommit();

    const int u = u_begin + step * kGroups + group;
    if (u >= u_end || !has_rows) continue;
    const float block_scale = __ldg(scale_row + u);
    const uint8_t* stage = smem + (step % plan.stages) * T::kStageBytes;
    const uint8_t* w_tile = stage + group * T::kWeightUnitBytes + warp_row * kUnitK;
    const uint8_t* x_tile = stage + T::kXOffset + group * T::kXUnitBytes;
    float blk[2][kNTiles][4] = {};
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint4 wv[2][2];  // [m16 tile][rows g, g + 8]
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * mt + 8 * h + g;  // r & 1 == g & 1
          wv[mt][h] = LoadShared16(w_tile + r * kUnitK + (((4 * c + t) ^ ((g & 1) << 2)) * 16));
        }
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k-steps 2 half, 2 half + 1
        uint32_t a[2][2][4];                  // [k-step][m16 tile] A fragments, widened once
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            const int j = 2 * half + jj;
            const uint32_t top = Word(wv[mt][0], j), bottom = Word(wv[mt][1], j);
            a[jj][mt][0] = E4M3PairToBF16(top, kLowPair);
            a[jj][mt][1] = E4M3PairToBF16(bottom, kLowPair);
            a[jj][mt][2] = E4M3PairToBF16(top, kHighPair);
            a[jj][mt][3] = E4M3PairToBF16(bottom, kHighPair);
          }
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          const int token = 8 * nt + g;  // token & 1 == g & 1
          const uint4 xv = LoadShared16(x_tile + token * (kUnitK * 2) + (((8 * c + 2 * t + half) ^ (g & 1)) * 16));
#pragma unroll
          for (int jj = 0; jj < 2; ++jj)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) MmaBF16(blk[mt][nt], a[jj][mt], Word(xv, 2 * jj), Word(xv, 2 * jj + 1));
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = fmaf(block_scale, blk[mt][nt][i], acc[mt][nt][i]);
  }
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the stages: reuse them for the partial sums

  // Warps' partial sums -> [group][token][row] (idle warps contribute zeros).
  float* partial = reinterpret_cast<float*>(smem);
  float* mine = partial + group * T::kTokens * T::kSumStride;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const int row = warp_row + 16 * mt + g, token = 8 * nt + 2 * t;
      mine[token * T::kSumStride + row] = acc[mt][nt][0];
      mine[(token + 1) * T::kSumStride + row] = acc[mt][nt][1];
      mine[token * T::kSumStride + row + 8] = acc[mt][nt][2];
      mine[(token + 1) * T::kSumStride + row + 8] = acc[mt][nt][3];
    }
  __syncthreads();

  auto store = [&](int e, float v) {
    const int64_t token = n0 + e / T::kRows;
    const int row = m0 + e % T::kRows;
    if (token >= p.n || row >= p.m) return;
    const int64_t at = token * p.m + row;
    if (p.y_f32) {
      static_cast<float*>(p.y)[at] = v;
    } else {
      static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16_rn(v);
    }
  };
  // Groups' sums in group order; with a cluster, into group 0's slot for the peers to read.
  for (int e = static_cast<int>(threadIdx.x); e < T::kTileElems; e += kThreads) {
    const int at = (e / T::kRows) * T::kSumStride + e % T::kRows;
    float sum = partial[at];
#pragma unroll
    for (int q = 1; q < kGroups; ++q) sum += partial[q * T::kTokens * T::kSumStride + at];
    if (plan.cluster == 1) {
      store(e, sum);
    } else if (kGroups > 1) {
      partial[at] = sum;
    }
  }
  if (plan.cluster == 1) return;

  // The cluster's CTAs hold partial sums of the same outputs over disjoint K ranges: each
  // rank adds its share of the elements over all ranks in rank order and stores it; the
  // second barrier keeps every CTA's shared memory alive until the peers have read it.
  ClusterSync();
  const int rank = static_cast<int>(blockIdx.y);  // cluster (1, cluster, 1) spans grid.y
  // Four elements per thread at a time, all remote loads before the stores, so that the
  // distributed-shared-memory latency is paid once per batch rather than once per element.
  constexpr int kBatch = 4;
  const int share = (T::kTileElems + plan.cluster - 1) / plan.cluster;
  const int e_end = min(T::kTileElems, (rank + 1) * share);
  for (int e0 = rank * share + static_cast<int>(threadIdx.x); e0 < e_end; e0 += kBatch * kThreads) {
    float sum[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = min(e0 + i * kThreads, e_end - 1);
      const int at = (e / T::kRows) * T::kSumStride + e % T::kRows;
      sum[i] = 0.0f;
#pragma unroll
      for (int q = 0; q < kW8A16MaxClusterSplit; ++q)
        if (q < plan.cluster) sum[i] += ClusterPeer(partial, q)[at];
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i)
      if (e0 + i * kThreads < e_end) store(e0 + i * kThreads, sum[i]);
  }
  ClusterSync();
}

using KernelFn = void (*)(Fp8W8A16Params, LaunchPlan);
template <int kNTiles, int kGroups>
constexpr int kStageBytes = Tiling<kNTiles, kGroups>::kStageBytes;
template <int kNTiles, int kGroups>
constexpr int kPartialBytes = Tiling<kNTiles, kGroups>::kPartialBytes;

struct Variant {
  KernelFn kernel;
  int stage_bytes;
  int partial_bytes;
};
template <int kNTiles, int kGroups>
constexpr Variant kVariant = {Fp8W8A16Kernel<kNTiles, kGroups>, kStageBytes<kNTiles, kGroups>,
                              kPartialBytes<kNTiles, kGroups>};
// [log2 warp groups][log2 n8 tiles]
constexpr Variant kVariants[3][4] = {
    {kVariant<1, 1>, kVariant<2, 1>, kVariant<4, 1>, kVariant<8, 1>},
    {kVariant<1, 2>, kVariant<2, 2>, kVariant<4, 2>, kVariant<8, 2>},
    {kVariant<1, 4>, kVariant<2, 4>, kVariant<4, 4>, kVariant<8, 4>},
};

int Log2(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

int64_t RowTiles(int m, int groups) {
  const int rows = kWarps / groups * kWarpRows;
  return (static_cast<int64_t>(m) + rows - 1) / rows;
}

}  // namespace

int Fp8W8A16KSplit(int m, int k, int num_sms, int compute_major) {
  if (compute_major < 9 || m <= 0 || k <= 0) return 1;
  const int units = (k + kUnitK - 1) / kUnitK;
  int cluster = 1, groups = 1;
  for (;;) {
    while (cluster < kW8A16MaxClusterSplit && RowTiles(m, groups) * cluster * 2 <= num_sms &&
           units >= cluster * 2 * groups)
      cluster *= 2;
    if (cluster < kW8A16MaxClusterSplit || groups == kW8A16MaxWarpGroups ||
        RowTiles(m, groups * 2) * cluster > num_sms || units < cluster * groups * 2)
      return cluster * groups;
    groups *= 2;
  }
}

cudaError_t LaunchFp8W8A16(const Fp8W8A16Params& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.m <= 0 || p.k <= 0 || p.k % kW8A16MinK != 0 || p.k_split < 1 || p.k_split > kW8A16MaxKSplit ||
      (p.k_split & (p.k_split - 1)) != 0)
    return cudaErrorInvalidValue;
  LaunchPlan plan;
  plan.cluster = std::min(p.k_split, kW8A16MaxClusterSplit);
  const int groups = p.k_split / plan.cluster;
  const int n_tiles = p.n >= kW8A16TokensPerCta ? 8 : static_cast<int>((p.n + 7) / 8);
  const Variant& v = kVariants[Log2(groups)][Log2(n_tiles)];
  const int64_t token_tiles = (p.n + kW8A16TokensPerCta - 1) / kW8A16TokensPerCta;
  const int64_t row_tiles = RowTiles(p.m, groups);
  if (token_tiles > INT32_MAX || row_tiles > 65535) return cudaErrorInvalidValue;

  // Host-side queries and attributes only (no stream work), so this is legal inside a capture.
  int device = 0, smem_optin = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (error != cudaSuccess) return error;
  plan.stages = std::min(kMaxStages, smem_optin / v.stage_bytes);
  if (plan.stages < kMinStages) return cudaErrorInvalidValue;
  const int smem_bytes = std::max(plan.stages * v.stage_bytes, v.partial_bytes);
  if (smem_bytes > smem_optin) return cudaErrorInvalidValue;
  error = cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (error != cudaSuccess) return error;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(plan.cluster),
                        static_cast<unsigned>(row_tiles));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (plan.cluster > 1) {
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 1;
    attribute[0].val.clusterDim.y = static_cast<unsigned>(plan.cluster);
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, v.kernel, p, plan);
}

}  // namespace peregrine::kernels
