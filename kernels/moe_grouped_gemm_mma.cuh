// The MXFP4 expert GEMMs on tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulators,
// sm_80+). Device code, included by moe_grouped_gemm.cu only; the launcher there picks it.
//
// Work item: (touched expert, tile of 16 output rows), one warp each, persistent grid, the
// expert's weight rows as A (16 rows x 16 inputs per MMA) and its assignments as B (16 inputs x
// 8 assignments, zero-padded; passes of up to kMaxTokenTiles tiles, the weights re-streamed per
// pass). The input order inside a 128-input step is permuted identically on both sides so that
// every lane reads contiguous memory:
//   lane (g = lane / 4, t = lane % 4) owns inputs [128 kb + 32 t, +32) of rows g and g + 8
//   (one 16-byte weight chunk per row = exactly one 32-input scale block) and of assignment g;
//   MMA step i (0..7) takes inputs 32 t + 4 i + {0, 1} as the fragment's k = 2t, 2t + 1 and
//   32 t + 4 i + {2, 3} as k = 8 + 2t, 8 + 2t + 1, i.e. weight bytes 2i, 2i + 1 of the chunk
//   and activation words 2i, 2i + 1 of the lane's 64 bytes.
// Decoding is exact: a shared table maps one packed byte to the bf16x2 pair of its two e2m1
// values (32 copies, one per lane, so the lookup never has a bank conflict), and one bf16x2
// multiply by the block's 2^(scale - 127) (a power of two: exact unless the product leaves
// the bf16 range, which is fp32's) gives the weight value the CPU reference computes.
// The table's rows are 256 bytes apart and it starts on a 64 KiB boundary of the shared
// window, so a lookup address is one byte permute: (table base, the packed byte, lane * 4);
// three instructions per weight pair (prmt, lds, hmul2). It lives in dynamic shared memory
// (kDynamicSmemBytes: the table plus room to align it), one CTA of 16 warps per SM.
// Split K (ChooseSplit): when the items are too few to occupy the grid's warps (batch 1: 6
// experts), groups of 2 or 4 neighbouring warps share an item, each streaming a contiguous
// share of its 128-input steps; the partial sums meet in shared memory beside the table
// (whichever side of it the alignment left room on) and the group's first warp adds them in
// rank order, so the result is deterministic for a given split.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/mma.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_router.cuh"

namespace peregrine::kernels::moe_mma {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMinCtasPerSm = 1;  // 16 warps per SM (the table takes 128 KiB); 128 registers
constexpr int kRows = 16;         // weight rows per work item: the MMA's M
constexpr int kTileTokens = 8;    // assignments per MMA: N
constexpr int kMaxTokenTiles = 2; // token tiles sharing one pass over the weights
constexpr int kStepInputs = 128;  // inputs per step: 4 lanes x one 32-input block each

constexpr uint32_t kTableRowBytes = 256;                   // one row per packed byte; lanes use 128
constexpr uint32_t kTableBytes = 256 * kTableRowBytes;       // 64 KiB, aligned to its size
constexpr int kDynamicSmemBytes = 2 * static_cast<int>(kTableBytes);  // any start can be aligned

// e2m1 (sign, 2-bit exponent, 1-bit mantissa) as bf16 bits: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ uint32_t E2M1ToBF16Bits(uint32_t nibble) {
  const uint32_t mag = nibble & 7u;
  const uint32_t bits = mag == 0u ? 0u : mag == 1u ? 0x3f00u : (((mag >> 1) + 126u) << 7) | ((mag & 1u) << 6);
  return bits | ((nibble & 8u) << 12);
}

// Row `byte`, column `lane`: the bf16x2 of the byte's two e2m1 values (low nibble low half).
__device__ __forceinline__ void FillE2M1Table(uint32_t table, int tid) {
  for (int i = tid; i < 256 * kWarpSize; i += kThreads) {
    const uint32_t byte = static_cast<uint32_t>(i) / kWarpSize;
    const uint32_t lane = static_cast<uint32_t>(i) % kWarpSize;
    const uint32_t value = E2M1ToBF16Bits(byte & 15u) | (E2M1ToBF16Bits(byte >> 4) << 16);
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(table + byte * kTableRowBytes + lane * 4u), "r"(value) : "memory");
  }
}

// 2^(s - 127) in both bf16 halves; s = 0 is the bf16 subnormal 2^-127, s = 255 is NaN.
__device__ __forceinline__ uint32_t ScaleBF16x2(uint32_t s) {
  const uint32_t bits = s == 0u ? 0x0040u : s == 255u ? 0x7fc0u : s << 7;
  return bits * 0x00010001u;
}

// a * b per bf16 half, rounded once (exact here: b is a power of two). The -0 addend keeps the
// sign of a zero product.
__device__ __forceinline__ uint32_t MulBF16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// Byte kByte of `word` decoded through this lane's table column. `lane_entry` is the table's
// shared address plus lane * 4: its byte 1 is zero (64 KiB alignment), so the entry's address
// is lane_entry with byte 1 replaced by the packed byte.
template <int kByte>
__device__ __forceinline__ uint32_t DecodeByte(uint32_t lane_entry, uint32_t word) {
  const uint32_t address = __byte_perm(word, lane_entry, 0x7604u | (kByte << 4));
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(address));
  return v;
}

// Weights are read once: bypass L1 so the activations, which every warp re-reads, stay there.
__device__ __forceinline__ uint4 LoadWeights(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Every CTA builds the same ascending list of experts with assignments (no grid-wide step,
// and the grid size never depends on it). Returns the count. Contains __syncthreads.
__device__ __forceinline__ int CollectTouchedExperts(const MoeExpertGemmParams& p, int* touched, int* warp_counts,
                                                     int block_threads) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int num_warps = block_threads / kWarpSize;
  int num_touched = 0;
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int e0 = 0; e0 < p.num_experts; e0 += block_threads) {
    const int e = e0 + tid;
    const bool hit = e < p.num_experts && p.expert_offsets[e + 1] > p.expert_offsets[e];
    const uint32_t ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < num_warps; ++w) {
      const int c = warp_counts[w];
      total += c;
      before += w < warp ? c : 0;
    }
    if (hit) touched[num_touched + before + __popc(ballot & lanes_below)] = e;
    num_touched += total;
    __syncthreads();
  }
  return num_touched;
}

// One 128-input step of this lane's weight chunks (kMats matrices x rows g, g + 8) and their
// scale bytes; chunks past in_dim are zeros with scale 2^0.
template <int kMats>
struct Stage {
  uint4 w[kMats][2];
  uint32_t s[kMats][2];
};

template <bool kGateUp>
struct TileContext {
  static constexpr int kMats = kGateUp ? 2 : 1;
  const uint8_t* w[kMats][2];   // this lane's chunk of rows g, g + 8 at step 0
  const uint8_t* sc[kMats][2];  // its scale byte at step 0
};

// Steps past in_dim and, with kSplit, at or past step_end (another warp's share of the
// item) load nothing.
template <int kMats, bool kSplit>
__device__ __forceinline__ void LoadStage(Stage<kMats>& st, const TileContext<kMats == 2>& ctx, int step, int step_end,
                                          int in_dim, int t) {
  const bool valid = (!kSplit || step < step_end) && step * kStepInputs + 32 * t < in_dim;
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.w[m][h] = valid ? LoadWeights(ctx.w[m][h] + static_cast<int64_t>(step) * (kStepInputs / 2))
                         : make_uint4(0u, 0u, 0u, 0u);
      st.s[m][h] = valid ? static_cast<uint32_t>(__ldg(ctx.sc[m][h] + step * (kStepInputs / 32))) : 127u;
    }
}

// One 128-input step: 8 MMAs per matrix and token tile.
template <int kMats, int kTiles>
__device__ __forceinline__ void ComputeStep(uint32_t lane_entry, const uint4 (&w)[kMats][2],
                                            const uint32_t (&s)[kMats][2], const uint4* const (&x)[kTiles],
                                            bool k_valid, int step, int t,
                                            float (&acc)[kMats][kTiles][4]) {
  uint32_t scale[kMats][2];
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) scale[m][h] = ScaleBF16x2(s[m][h]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // weight word q = MMA steps 2q (bytes 0, 1) and 2q + 1 (bytes 2, 3)
    // Activation words 4q..4q + 3 of each tile (L1 hits: every warp on this expert reads them).
    uint4 xv[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
      xv[j] = k_valid && x[j] != nullptr ? __ldg(x[j] + step * (kStepInputs / 8) + 4 * t + q)
                                         : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const uint32_t w0 = q == 0 ? w[m][0].x : q == 1 ? w[m][0].y : q == 2 ? w[m][0].z : w[m][0].w;
      const uint32_t w1 = q == 0 ? w[m][1].x : q == 1 ? w[m][1].y : q == 2 ? w[m][1].z : w[m][1].w;
      const uint32_t a_lo[4] = {MulBF16x2(DecodeByte<0>(lane_entry, w0), scale[m][0]),
                                MulBF16x2(DecodeByte<0>(lane_entry, w1), scale[m][1]),
                                MulBF16x2(DecodeByte<1>(lane_entry, w0), scale[m][0]),
                                MulBF16x2(DecodeByte<1>(lane_entry, w1), scale[m][1])};
      const uint32_t a_hi[4] = {MulBF16x2(DecodeByte<2>(lane_entry, w0), scale[m][0]),
                                MulBF16x2(DecodeByte<2>(lane_entry, w1), scale[m][1]),
                                MulBF16x2(DecodeByte<3>(lane_entry, w0), scale[m][0]),
                                MulBF16x2(DecodeByte<3>(lane_entry, w1), scale[m][1])};
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        MmaBF16(acc[m][j], a_lo, xv[j].x, xv[j].y);
        MmaBF16(acc[m][j], a_hi, xv[j].z, xv[j].w);
      }
    }
  }
}

// Rows [row0, row0 + 16) of expert e for the assignments sorted_assignments[first, min(first +
// 8 kTiles, end)), 128-input steps [step_begin, step_end) only: streams that part of the rows
// once and adds it to acc.
template <bool kGateUp, int kTiles, bool kSplit>
__device__ __forceinline__ void AccumulateRowTile(const MoeExpertGemmParams& p, uint32_t lane_entry, int e, int row0,
                                                  int first, int end, int lane, int step_begin, int step_end,
                                                  float (&acc)[kGateUp ? 2 : 1][kTiles][4]) {
  constexpr int kMats = kGateUp ? 2 : 1;
  // A ring of steps in registers, kStages - 1 of them in flight while one is decoded: 4-8
  // weight chunks per lane for gate-up (two matrices), 4-6 for down.
  constexpr int kStages = kGateUp ? 2 : 3;
  const int g = lane / 4, t = lane % 4;
  const int64_t packed_row = p.in_dim / 2, scale_row = p.in_dim / 32;

  TileContext<kGateUp> ctx;
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = static_cast<int64_t>(e) * p.out_dim + row0 + g + 8 * h;
      ctx.w[m][h] = static_cast<const uint8_t*>(m == 0 ? p.w_a : p.w_b) + row * packed_row + 16 * t;
      ctx.sc[m][h] = (m == 0 ? p.scale_a : p.scale_b) + row * scale_row + t;
    }
  const uint4* x[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int entry = first + j * kTileTokens + g;
    x[j] = entry < end ? reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.x) +
                                                        static_cast<int64_t>(p.sorted_assignments[entry] /
                                                                             p.input_row_divisor) *
                                                            p.in_dim)
                       : nullptr;
  }

  Stage<kMats> ring[kStages];
#pragma unroll
  for (int u = 0; u + 1 < kStages; ++u) LoadStage<kMats, kSplit>(ring[u], ctx, step_begin + u, step_end, p.in_dim, t);
  for (int step0 = step_begin; step0 < step_end; step0 += kStages) {
#pragma unroll
    for (int u = 0; u < kStages; ++u) {
      const int step = step0 + u;
      if (step >= step_end) break;
      // No memory access for steps past step_end or in_dim.
      LoadStage<kMats, kSplit>(ring[(u + kStages - 1) % kStages], ctx, step + kStages - 1, step_end, p.in_dim, t);
      ComputeStep<kMats, kTiles>(lane_entry, ring[u].w, ring[u].s, x, step * kStepInputs + 32 * t < p.in_dim, step,
                                 t, acc);
    }
  }
}

// Writes h (gate-up) or y (down) for the tile's rows and assignments from the full sums.
template <bool kGateUp, int kTiles>
__device__ __forceinline__ void StoreRowTile(const MoeExpertGemmParams& p, int row0, int first, int end, int lane,
                                             const float (&acc)[kGateUp ? 2 : 1][kTiles][4]) {
  const int g = lane / 4, t = lane % 4;
  // c0, c1: row g, assignments 2t, 2t + 1 of the tile; c2, c3: row g + 8.
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int entry = first + j * kTileTokens + 2 * t + q;
      if (entry >= end) continue;
      const int64_t out_row = static_cast<int64_t>(p.sorted_assignments[entry]) * p.out_dim + row0 + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kGateUp) {
          float gate = acc[0][j][2 * h + q], up = acc[1][j][2 * h + q];
          const float limit = p.swiglu_limit;
          if (limit > 0.0f) {
            gate = fminf(gate, limit);
            up = fminf(fmaxf(up, -limit), limit);
          }
          const float silu = gate / (1.0f + expf(-gate));
          static_cast<__nv_bfloat16*>(p.out)[out_row + 8 * h] = __float2bfloat16_rn(silu * up);
        } else {
          static_cast<float*>(p.out)[out_row + 8 * h] = acc[0][j][2 * h + q];
        }
      }
    }
}

// Split K: when there are too few items to give every warp one (batch 1: 6 experts), `split`
// neighbouring warps of a CTA share an item, warp `rank` of the group streaming steps
// [rank * S / split, (rank + 1) * S / split) of its S 128-input steps. Ranks 1.. leave their
// fp32 partials in shared memory, rank 0 adds them in rank order (deterministic) and stores.
constexpr int kMaxSplit = 4;
constexpr int kPartialFloats = 2 * 4;  // acc[kMats][1][4]: split passes take one token tile
// [kWarps][kPartialFloats][32 lanes] fp32: one slot per warp, lane-minor (conflict-free).
constexpr uint32_t kPartialBytes = kWarps * kPartialFloats * kWarpSize * sizeof(float);
static_assert(kPartialBytes <= kTableBytes / 2, "the partials live beside the table");

// bar.sync on barrier 1 + group (0 is __syncthreads) for the group's split * 32 threads.
__device__ __forceinline__ void GroupBarrier(int group, int split) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(split * kWarpSize) : "memory");
}

// The split in 1, 2, 4 (at least one step per warp) with the lowest cost = (rounds of items
// over the grid's warp groups) x (steps per warp); a split must cut the cost by more than a
// fifth (its barriers, partials and one-tile passes are not free), so batch 16+ keeps one
// warp per item. Depends only on the touched-expert count and the grid, so every CTA and
// every warp agrees.
__device__ __forceinline__ int ChooseSplit(int64_t num_items, int num_steps) {
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t unsplit_cost = (num_items + num_warps - 1) / num_warps * num_steps;
  int best = 1;
  int64_t best_cost = unsplit_cost;
  for (int split = 2; split <= kMaxSplit && split <= num_steps; split *= 2) {
    const int64_t rounds = (num_items * split + num_warps - 1) / num_warps;
    const int64_t cost = rounds * ((num_steps + split - 1) / split);
    if (cost < best_cost && 5 * cost < 4 * unsplit_cost) {
      best = split;
      best_cost = cost;
    }
  }
  return best;
}

// The shared address of the kPartialBytes area: whichever side of the table has room (the
// table starts less than 64 KiB into the 128 KiB window, so one side has at least 32 KiB).
// Re-derived where needed (a few instructions) rather than kept live across the streaming loop.
__device__ __forceinline__ uint32_t PartialsAddress() {
  extern __shared__ uint8_t dynamic_smem[];  // kDynamicSmemBytes
  const uint32_t window = SmemAddress(dynamic_smem);
  const uint32_t table = (window + kTableBytes - 1u) & ~(kTableBytes - 1u);
  return table - window >= kPartialBytes ? window : table + kTableBytes;
}

// One pass of an item (see AccumulateRowTile) by one warp.
template <bool kGateUp, int kTiles>
__device__ __forceinline__ void ItemPass(const MoeExpertGemmParams& p, uint32_t lane_entry, int e, int row0,
                                         int first, int end, int lane) {
  float acc[kGateUp ? 2 : 1][kTiles][4] = {};
  AccumulateRowTile<kGateUp, kTiles, false>(p, lane_entry, e, row0, first, end, lane, 0,
                                            (p.in_dim + kStepInputs - 1) / kStepInputs, acc);
  StoreRowTile<kGateUp, kTiles>(p, row0, first, end, lane, acc);
}

// One pass of one token tile of an item by a group of `split` warps (a power of two) sharing
// its steps; every warp of the group calls it with the same arguments.
template <bool kGateUp>
__device__ __forceinline__ void SplitItemPass(const MoeExpertGemmParams& p, uint32_t lane_entry, int e, int row0,
                                              int first, int end, int lane, int warp, int split) {
  constexpr int kMats = kGateUp ? 2 : 1;
  const int rank = warp & (split - 1);
  const int group = warp / split;
  const int num_steps = (p.in_dim + kStepInputs - 1) / kStepInputs;
  float acc[kMats][1][4] = {};
  AccumulateRowTile<kGateUp, 1, true>(p, lane_entry, e, row0, first, end, lane, rank * num_steps / split,
                                      (rank + 1) * num_steps / split, acc);
  const uint32_t mine = PartialsAddress() + static_cast<uint32_t>((warp * kPartialFloats * kWarpSize + lane) * 4);
  if (rank != 0) {
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(mine + (m * 4 + c) * kWarpSize * 4u), "f"(acc[m][0][c])
                     : "memory");
  }
  GroupBarrier(group, split);  // the partials are written
  if (rank == 0) {
    for (int r = 1; r < split; ++r) {
      const uint32_t other = mine + static_cast<uint32_t>(r * kPartialFloats * kWarpSize * 4);
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float v;
          asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(other + (m * 4 + c) * kWarpSize * 4u) : "memory");
          acc[m][0][c] += v;
        }
    }
  }
  GroupBarrier(group, split);  // read: the next pass may overwrite them
  if (rank == 0) StoreRowTile<kGateUp, 1>(p, row0, first, end, lane, acc);
}

template <bool kGateUp>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) MoeMxfp4MmaKernel(const MoeExpertGemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the launcher only picks this kernel on sm_80+
#else
  extern __shared__ uint8_t dynamic_smem[];  // kDynamicSmemBytes
  __shared__ int touched[kMoeMaxExperts];
  __shared__ int warp_counts[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const uint32_t table = (SmemAddress(dynamic_smem) + kTableBytes - 1u) & ~(kTableBytes - 1u);
  FillE2M1Table(table, tid);  // shared memory only: may overlap the predecessor
  StartAfterPredecessor();
  const uint32_t lane_entry = table + static_cast<uint32_t>(lane) * 4u;
  const int num_touched = CollectTouchedExperts(p, touched, warp_counts, kThreads);
  __syncthreads();  // the table (CollectTouchedExperts syncs too, but only when E > 0)

  // Items are (touched expert, 16-row tile); neighbouring warps (groups) take neighbouring
  // tiles of one expert, so they share its activations in L1. 32-bit item arithmetic: the
  // launcher only picks this kernel when E * out_dim / 16 and the grid's warps stay below 2^30.
  const int num_tiles = p.out_dim / kRows;
  const int num_items = num_touched * num_tiles;
  // Measured on the H200 at batch 1 (bench/moe/NOTES.md): splitting gate-up (32 steps per
  // item) takes it from 1.06 to 1.54 TB/s; down (16 steps, split 4) lost 6%, so it keeps one
  // warp per item.
  // Batch-invariant mode keeps one warp per item at every batch size (the split changes the
  // order of each sum, and it depends on how many experts the batch touches).
  const int split =
      kGateUp && !p.batch_invariant ? ChooseSplit(num_items, (p.in_dim + kStepInputs - 1) / kStepInputs) : 1;
  if (split == 1) {
    // One warp per item, passes of up to kMaxTokenTiles token tiles.
    const int stride = static_cast<int>(gridDim.x) * kWarps;
    for (int item = static_cast<int>(blockIdx.x) * kWarps + warp; item < num_items; item += stride) {
      const int slot = item / num_tiles;
      const int row0 = (item - slot * num_tiles) * kRows;
      const int e = touched[slot];
      const int begin = p.expert_offsets[e];
      const int end = p.expert_offsets[e + 1];
      for (int first = begin; first < end; first += kMaxTokenTiles * kTileTokens) {
        if (end - first > kTileTokens) {
          ItemPass<kGateUp, kMaxTokenTiles>(p, lane_entry, e, row0, first, end, lane);
        } else {
          ItemPass<kGateUp, 1>(p, lane_entry, e, row0, first, end, lane);
        }
      }
    }
  } else {
    // Groups of `split` warps per item, passes of one token tile (splitting only happens
    // when items are few, i.e. few assignments).
    const int groups = kWarps / split;
    const int stride = static_cast<int>(gridDim.x) * groups;
    for (int item = static_cast<int>(blockIdx.x) * groups + warp / split; item < num_items; item += stride) {
      const int slot = item / num_tiles;
      const int row0 = (item - slot * num_tiles) * kRows;
      const int e = touched[slot];
      const int begin = p.expert_offsets[e];
      const int end = p.expert_offsets[e + 1];
      for (int first = begin; first < end; first += kTileTokens)
        SplitItemPass<kGateUp>(p, lane_entry, e, row0, first, end, lane, warp, split);
    }
  }
#endif
}

}  // namespace peregrine::kernels::moe_mma
