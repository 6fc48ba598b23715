// The MXFP4 expert GEMMs on tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulators,
// sm_80+). Device code, included by moe_grouped_gemm.cu only; the launcher there picks it.
//
// Work item: (touched expert, 16 output rows of gate and up, or 32 of down), one warp each,
// persistent grid, the item's two 16-row halves as two A operands (16 rows x 16 inputs per
// MMA) sharing its assignments as B (16 inputs x 8 assignments, zero-padded; passes of up to
// kMaxTokenTiles tiles, the weights re-streamed per pass). The input order inside a 128-input step is permuted identically on both sides so that
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
// three instructions per weight pair (prmt, lds, hmul2).
// Streaming: each warp has a ring in shared memory (its slot) of two stages, a stage being the
// item's 32 rows over 2 consecutive 128-input steps plus their scale bytes: 4 KiB of weights,
// copied with cp.async (16 bytes per lane, L2 only) one stage ahead of the decode, also across
// the boundary to the warp's next item, each instruction reading whole 128-byte runs of 4 rows.
// Lanes then read their MMA chunks from the stage (rows XOR-swizzled: conflict-free). The
// register ring this replaced read 64 bytes of each of 8 rows per instruction, one step
// ahead: DRAM reached 59% of its peak at batch 64 with 72% of the cycles stalled on those
// loads (Nsight Compute). The dynamic window (kDynamicSmemBytes) holds the table and kWarps
// slots placed around it (SlotAddress), one CTA of 16 warps per SM.
// Split K (ChooseSplit): when the items are too few to occupy the grid's warps (batch 1: 6
// experts), groups of 2 or 4 neighbouring warps share an item, each streaming a contiguous
// share of its stages; the partial sums meet in shared memory (the table rows' unused
// halves) and the group's first warp adds them in rank order, so the result is deterministic
// for a given split.
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
constexpr int kMinCtasPerSm = 1;  // 16 warps per SM (table and rings: ~210 KiB); 128 registers
constexpr int kRows = 16;         // weight rows per MMA tile: the MMA's M
constexpr int kTileTokens = 8;    // assignments per MMA: N
constexpr int kMaxTokenTiles = 2; // token tiles sharing one pass over the weights
constexpr int kStepInputs = 128;  // inputs per step: 4 lanes x one 32-input block each

constexpr uint32_t kTableRowBytes = 256;                   // one row per packed byte; lanes use 128
constexpr uint32_t kTableBytes = 256 * kTableRowBytes;       // 64 KiB, aligned to its size

// A work item is two 16-row MMA tiles ("halves", the A operands of acc[0] and acc[1]) that
// share every activation load: gate-up's gate and up rows of one 16-row tile, or down's rows
// [row0, row0 + 16) and [row0 + 16, row0 + 32) of w2 (so down items are 32 rows).
constexpr int kHalves = 2;
template <bool kGateUp>
inline constexpr int kItemRows = kGateUp ? kRows : kHalves * kRows;
constexpr int kWarpRows = kHalves * kRows;  // weight rows a warp streams per item
// The per-warp ring (shared memory) holds two stages of the warp's 32 rows: kStageSteps
// consecutive 128-input steps of each (64 bytes per row and step), copied row by row so that
// DRAM sees 128-byte runs of a row where one step alone would read 64 bytes of each of 8 rows
// per instruction. In the fast form (kWholeStages: in_dim a multiple of 256) the rows' scale
// bytes of the stage travel with it; otherwise stages are single steps with zero-filled
// chunks past in_dim and the scale bytes are read when decoded.
template <bool kWholeStages>
inline constexpr int kStageSteps = kWholeStages ? 2 : 1;
template <bool kWholeStages>
inline constexpr uint32_t kStageChunkBytes = kWarpRows * kStageSteps<kWholeStages> * 64;
// A whole stage: 4 KiB of weights and 256 bytes of scales.
inline constexpr uint32_t kStageBytes = kStageChunkBytes<true> + kWarpRows * kStageSteps<true> * 4;
static_assert(kStageChunkBytes<true> == 4096, "4 KiB stages");
inline constexpr uint32_t kSlotBytes = 2 * kStageBytes;
// The table and kWarps slots fit around a 64 KiB-aligned table wherever the window starts:
// the slots below it waste less than one slot, hence one spare.
inline constexpr int kDynamicSmemBytes = static_cast<int>(kTableBytes + (kWarps + 1) * kSlotBytes);
static_assert(kSlotBytes % 128 == 0, "slots keep 16-byte alignment");
static_assert((kWarps + 1) * kSlotBytes >= kTableBytes, "a window starting just past a 64 KiB boundary holds the table");

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

// The dynamic window: the decode table at the first 64 KiB boundary inside it, and warp w's
// ring slot below the table while slots fit there, above it otherwise. Re-derived where
// needed (a few instructions) rather than kept live across the streaming loop.
__device__ __forceinline__ uint32_t WindowAddress() {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  return SmemAddress(dynamic_smem);
}

__device__ __forceinline__ uint32_t TableAddress() {
  return (WindowAddress() + kTableBytes - 1u) & ~(kTableBytes - 1u);
}

__device__ __forceinline__ uint32_t SlotAddress(int warp) {
  const uint32_t window = WindowAddress();
  const uint32_t table = (window + kTableBytes - 1u) & ~(kTableBytes - 1u);
  const int below = static_cast<int>((table - window) / kSlotBytes);
  return warp < below ? window + static_cast<uint32_t>(warp) * kSlotBytes
                      : table + kTableBytes + static_cast<uint32_t>(warp - below) * kSlotBytes;
}

__device__ __forceinline__ uint4 LoadShared128(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(address));
  return v;
}

__device__ __forceinline__ uint2 LoadShared64(uint32_t address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(address));
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

// The first weight row of half m of the item at row0 of expert e, and its scales: gate-up's
// halves are the same rows of w_a and w_b, down's are 16 rows apart in w_a.
template <bool kGateUp>
__device__ __forceinline__ int64_t HalfRow(const MoeExpertGemmParams& p, int m, int e, int row0) {
  return static_cast<int64_t>(e) * p.out_dim + row0 + (kGateUp ? 0 : m * kRows);
}

template <bool kGateUp>
__device__ __forceinline__ const uint8_t* TileRows(const MoeExpertGemmParams& p, int m, int e, int row0) {
  return static_cast<const uint8_t*>(kGateUp && m == 1 ? p.w_b : p.w_a) +
         HalfRow<kGateUp>(p, m, e, row0) * static_cast<int64_t>(p.in_dim / 2);
}

template <bool kGateUp>
__device__ __forceinline__ const uint8_t* TileScales(const MoeExpertGemmParams& p, int m, int e, int row0) {
  return (kGateUp && m == 1 ? p.scale_b : p.scale_a) + HalfRow<kGateUp>(p, m, e, row0) * (p.in_dim / 32);
}

// Chunk c (16 bytes) of a stage row sits at position c ^ ChunkSwizzle(row): rows g and g + 1,
// which one quarter-warp reads together, then fall in different banks.
template <bool kWholeStages>
__device__ __forceinline__ int ChunkSwizzle(int row) {
  return kWholeStages ? (row & 1) << 2 : 0;
}

// Copies stage `stage` (steps [stage * kStageSteps, +kStageSteps)) of both halves of the item
// at row0 of expert e into ring position `r` of the warp's slot: lane-consecutive 16-byte
// chunks of one row, so each instruction reads whole runs of a few rows. Chunks past in_dim are
// zero-filled without a read. Addresses are one per-lane base per matrix plus immediates, to
// keep registers for the decode.
template <bool kGateUp, bool kWholeStages>
__device__ __forceinline__ void IssueStage(const MoeExpertGemmParams& p, uint32_t slot, int r, int e, int row0,
                                           int stage, int lane) {
  constexpr int kSteps = kStageSteps<kWholeStages>;
  constexpr int kChunksPerRow = 4 * kSteps;
  constexpr int kRowsPerCopy = kWarpSize / kChunksPerRow;  // even: a lane's rows share a parity
  constexpr int kCopiesPerMatrix = kRows / kRowsPerCopy;
  static_assert(kRowsPerCopy % 2 == 0 && kRows % kRowsPerCopy == 0, "copy layout");
  const int64_t packed_row = p.in_dim / 2;
  const int step0 = stage * kSteps;
  const int c = lane % kChunksPerRow, lane_row = lane / kChunksPerRow;
  const bool valid = kWholeStages || step0 * kStepInputs + 32 * c < p.in_dim;  // kSteps == 1 otherwise
  const int64_t lane_offset = valid ? lane_row * packed_row + static_cast<int64_t>(step0) * (kStepInputs / 2) + 16 * c
                                    : lane_row * packed_row;
  const uint32_t stage_base = slot + static_cast<uint32_t>(r) * kStageBytes;
  const uint32_t lane_dst =
      stage_base +
      static_cast<uint32_t>((lane_row * kChunksPerRow + (c ^ ChunkSwizzle<kWholeStages>(lane_row))) * 16);
  const uint32_t row_stride = static_cast<uint32_t>(kRowsPerCopy * packed_row);
#pragma unroll
  for (int m = 0; m < kHalves; ++m) {
    const uint8_t* src = TileRows<kGateUp>(p, m, e, row0) + lane_offset;
#pragma unroll
    for (int i = 0; i < kCopiesPerMatrix; ++i) {
      CpAsync16To(lane_dst + static_cast<uint32_t>(((m * kCopiesPerMatrix + i) * kRowsPerCopy * kChunksPerRow) * 16),
                  src + i * row_stride, valid);
    }
  }
  if constexpr (kWholeStages) {
    // The stage's scale bytes, 4 per row and step: 8 bytes per lane covers every row.
    constexpr int kLanesPerRow = kSteps / 2;
    static_assert(kWarpRows * kLanesPerRow == kWarpSize, "one 8-byte scale copy per lane");
    const int row = lane / kLanesPerRow, part = lane % kLanesPerRow;
    CpAsync8To(stage_base + kStageChunkBytes<true> + static_cast<uint32_t>(row * 4 * kSteps + 8 * part),
               TileScales<kGateUp>(p, row / kRows, e, row0) + (row % kRows) * (p.in_dim / 32) + 4 * step0 + 8 * part);
  }
}

__device__ __forceinline__ uint32_t LoadSharedU8(uint32_t address) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(address));
  return v;
}

// Step `j` of the stage at stage_base: this lane's chunks from shared memory; scale bytes from
// the stage (kWholeStages: row r's are bytes [4 * kStageSteps * r, +4 kStageSteps) after the
// chunks, step j's four at 4 j, byte t this lane's) or from global memory.
template <bool kGateUp, bool kWholeStages>
__device__ __forceinline__ void ReadStep(Stage<kHalves>& st, const MoeExpertGemmParams& p,
                                         uint32_t stage_base, int j, int e, int row0, int step, int g, int t) {
  constexpr int kMats = kHalves;
  constexpr int kSteps = kStageSteps<kWholeStages>;
  constexpr int kChunksPerRow = 4 * kSteps;
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m * kRows + 8 * h + g;
      const int c = 4 * j + t;
      st.w[m][h] = LoadShared128(stage_base +
                                 static_cast<uint32_t>((row * kChunksPerRow + (c ^ ChunkSwizzle<kWholeStages>(row))) * 16));
      if constexpr (kWholeStages) {
        st.s[m][h] = LoadSharedU8(stage_base + kStageChunkBytes<true> +
                                  static_cast<uint32_t>(row * 4 * kSteps + 4 * j + t));
      } else {
        const bool valid = step * kStepInputs + 32 * t < p.in_dim;
        st.s[m][h] = valid ? static_cast<uint32_t>(__ldg(TileScales<kGateUp>(p, m, e, row0) + (8 * h + g) * (p.in_dim / 32) +
                                                        step * (kStepInputs / 32) + t))
                           : 127u;
      }
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

// A warp's work streams as a sequence of units (an item's pass, or a split group's share of
// it), each a run of stages, with one stage in flight: while a stage is decoded, the next one
// (of this unit, or the first of the next unit) is being copied into the other ring position.
struct NextUnit {
  int e = -1;  // < 0: none
  int row0 = 0;
  int stage = 0;  // its first stage
};

// Rows [row0, row0 + 16) of expert e for the assignments sorted_assignments[first, min(first +
// 8 kTiles, end)), stages [stage_begin, stage_end): streams them once through the warp's ring
// and adds them to acc. On entry stage_begin sits (issued, committed) at ring position `pos`;
// on return the next unit's first stage does (when there is one) and `pos` points at it.
template <bool kGateUp, int kTiles, bool kWholeStages>
__device__ __forceinline__ void AccumulateRowTile(const MoeExpertGemmParams& p, uint32_t lane_entry, uint32_t slot,
                                                  int& pos, int e, int row0, int first, int end, int lane,
                                                  int stage_begin, int stage_end, const NextUnit& next,
                                                  float (&acc)[kHalves][kTiles][4]) {
  constexpr int kMats = kHalves;
  constexpr int kSteps = kStageSteps<kWholeStages>;
  const int g = lane / 4, t = lane % 4;
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
  for (int k = stage_begin; k < stage_end; ++k) {
    // Lanes read chunks other lanes copied: every lane has finished reading the position about
    // to be refilled (the previous stage) before any lane refills it, and every lane's copies
    // of this stage have landed before any lane reads them.
    __syncwarp();
    // One commit group per stage (empty when nothing follows), so that "at most one group
    // pending" means the stage about to be read has landed.
    if (k + 1 < stage_end) {
      IssueStage<kGateUp, kWholeStages>(p, slot, pos ^ 1, e, row0, k + 1, lane);
    } else if (next.e >= 0) {
      IssueStage<kGateUp, kWholeStages>(p, slot, pos ^ 1, next.e, next.row0, next.stage, lane);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncwarp();
    const uint32_t stage_base = slot + static_cast<uint32_t>(pos) * kStageBytes;
#pragma unroll 1
    for (int j = 0; j < kSteps; ++j) {
      const int step = k * kSteps + j;
      Stage<kMats> st;
      ReadStep<kGateUp, kWholeStages>(st, p, stage_base, j, e, row0, step, g, t);
      ComputeStep<kMats, kTiles>(lane_entry, st.w, st.s, x, step * kStepInputs + 32 * t < p.in_dim, step, t, acc);
    }
    pos ^= 1;
  }
}

// Writes h (gate-up) or y (down) for the tile's rows and assignments from the full sums.
template <bool kGateUp, int kTiles>
__device__ __forceinline__ void StoreRowTile(const MoeExpertGemmParams& p, int row0, int first, int end, int lane,
                                             const float (&acc)[kHalves][kTiles][4]) {
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
#pragma unroll
          for (int m = 0; m < kHalves; ++m) static_cast<float*>(p.out)[out_row + m * kRows + 8 * h] = acc[m][j][2 * h + q];
        }
      }
    }
}

// Split K: when there are too few items to give every warp one (batch 1: 6 experts), `split`
// neighbouring warps of a CTA share an item, warp `rank` of the group streaming stages
// [rank * S / split, (rank + 1) * S / split) of its S stages. Ranks 1.. leave their fp32
// partials in shared memory, rank 0 adds them in rank order (deterministic) and stores.
constexpr int kMaxSplit = 4;
constexpr int kPartialFloats = 2 * 4;  // acc[kMats][1][4]: split passes take one token tile
// Warp w's partial f of lane l: the unused upper half of table row 8 w + f (lanes' table
// columns use the first 128 bytes of each 256-byte row), so the ring keeps its prefetch.
__device__ __forceinline__ uint32_t PartialAddress(uint32_t table, int warp, int f, int lane) {
  return table + static_cast<uint32_t>((warp * kPartialFloats + f) * kTableRowBytes + kTableRowBytes / 2 + lane * 4);
}
static_assert(kWarps * kPartialFloats <= 256 && kWarpSize * 4 <= kTableRowBytes / 2, "partials in the table's spare half");

// bar.sync on barrier 1 + group (0 is __syncthreads) for the group's split * 32 threads.
__device__ __forceinline__ void GroupBarrier(int group, int split) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(split * kWarpSize) : "memory");
}

// The split in 1, 2, 4 (at least one stage per warp) with the lowest cost = (rounds of items
// over the grid's warp groups) x (stages per warp); a split must cut the cost by more than a
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

// The warp's next unit in the unsplit walk: the item's next pass, else the first pass of the
// warp's next item. Returns false when the warp has no more work.
struct Walk {
  int item, e, row0, begin, end, first;
};

template <bool kGateUp>
__device__ __forceinline__ bool StartItem(const MoeExpertGemmParams& p, const int* touched, int num_tiles,
                                          int num_items, int item, Walk& w) {
  if (item >= num_items) return false;
  const int index = item / num_tiles;
  w.item = item;
  w.row0 = (item - index * num_tiles) * kItemRows<kGateUp>;
  w.e = touched[index];
  w.begin = p.expert_offsets[w.e];
  w.end = p.expert_offsets[w.e + 1];
  w.first = w.begin;
  return true;
}

// One pass of an item (see AccumulateRowTile) by one warp.
template <bool kGateUp, int kTiles, bool kWholeStages>
__device__ __forceinline__ void ItemPass(const MoeExpertGemmParams& p, uint32_t lane_entry, uint32_t slot, int& pos,
                                         const Walk& w, int num_stages, const NextUnit& next, int lane) {
  const int end = min(w.end, w.first + kTiles * kTileTokens);
  float acc[kHalves][kTiles][4] = {};
  AccumulateRowTile<kGateUp, kTiles, kWholeStages>(p, lane_entry, slot, pos, w.e, w.row0, w.first, end, lane, 0,
                                                   num_stages, next, acc);
  StoreRowTile<kGateUp, kTiles>(p, w.row0, w.first, end, lane, acc);
}

// One pass of one token tile of an item by a group of `split` warps (a power of two) sharing
// its stages; every warp of the group calls it with the same item and pass.
template <bool kGateUp, bool kWholeStages>
__device__ __forceinline__ void SplitItemPass(const MoeExpertGemmParams& p, uint32_t lane_entry, uint32_t table,
                                              uint32_t slot, int& pos, const Walk& w, int stage_begin, int stage_end,
                                              const NextUnit& next, int lane, int warp, int split) {
  constexpr int kMats = kHalves;
  const int rank = warp & (split - 1);
  const int group = warp / split;
  const int end = min(w.end, w.first + kTileTokens);
  float acc[kMats][1][4] = {};
  AccumulateRowTile<kGateUp, 1, kWholeStages>(p, lane_entry, slot, pos, w.e, w.row0, w.first, end, lane, stage_begin,
                                              stage_end, next, acc);
  if (rank != 0) {
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(PartialAddress(table, warp, m * 4 + c, lane)), "f"(acc[m][0][c])
                     : "memory");
  }
  GroupBarrier(group, split);  // the partials are written
  if (rank == 0) {
    for (int r = 1; r < split; ++r) {
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float v;
          asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(PartialAddress(table, warp + r, m * 4 + c, lane))
                       : "memory");
          acc[m][0][c] += v;
        }
    }
  }
  GroupBarrier(group, split);  // read: the next pass may overwrite them
  if (rank == 0) StoreRowTile<kGateUp, 1>(p, w.row0, w.first, end, lane, acc);
}

// kWholeStages: in_dim is a multiple of 256, so rows stream in whole two-step stages with
// their scales (the launcher picks it).
template <bool kGateUp, bool kWholeStages>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) MoeMxfp4MmaKernel(const MoeExpertGemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the launcher only picks this kernel on sm_80+
#else
  __shared__ int touched[kMoeMaxExperts];
  __shared__ int warp_counts[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const uint32_t table = TableAddress();
  FillE2M1Table(table, tid);  // shared memory only: may overlap the predecessor
  StartAfterPredecessor();
  const uint32_t lane_entry = table + static_cast<uint32_t>(lane) * 4u;
  const int num_touched = CollectTouchedExperts(p, touched, warp_counts, kThreads);
  __syncthreads();  // the table (CollectTouchedExperts syncs too, but only when E > 0)

  // Items are (touched expert, row tile); neighbouring warps (groups) take neighbouring
  // tiles of one expert, so they share its activations in L1. 32-bit item arithmetic: the
  // launcher only picks this kernel when E * out_dim / 16 and the grid's warps stay below 2^30.
  const int num_tiles = p.out_dim / kItemRows<kGateUp>;
  const int num_items = num_touched * num_tiles;
  const int num_stages = (p.in_dim + kStepInputs - 1) / kStepInputs / kStageSteps<kWholeStages>;
  // Batch 1 splits gate-up and down items in two (bench/moe/NOTES.md). Batch-invariant mode
  // keeps one warp per item at every batch size (the split changes the order of each sum, and
  // it depends on how many experts the batch touches).
  const int split = !p.batch_invariant ? ChooseSplit(num_items, num_stages) : 1;
  const uint32_t slot = SlotAddress(warp);
  int pos = 0;
  // Each warp walks its units in order with one stage in flight across unit boundaries; the
  // first unit's first stage is issued here. Passes: up to kMaxTokenTiles token tiles each
  // (one with a split).
  const int tiles_per_pass = split == 1 ? kMaxTokenTiles : 1;
  const int groups = kWarps / split;
  const int rank = warp & (split - 1);
  const int stage_begin = rank * num_stages / split, stage_end = (rank + 1) * num_stages / split;
  const int stride = static_cast<int>(gridDim.x) * groups;
  // Enough items for every group: neighbouring groups of a CTA take neighbouring items (tiles
  // of one expert share its activations in L1). Fewer (batch 1: 768 gate-up items for 1,056
  // groups of two warps): item i goes to CTA i % grid, so every SM streams (taking CTAs in
  // order left 36 of 132 SMs idle).
  const int first_item = num_items >= stride ? static_cast<int>(blockIdx.x) * groups + warp / split
                                             : (warp / split) * static_cast<int>(gridDim.x) + static_cast<int>(blockIdx.x);
  Walk w;
  if (!StartItem<kGateUp>(p, touched, num_tiles, num_items, first_item, w)) return;
  IssueStage<kGateUp, kWholeStages>(p, slot, pos, w.e, w.row0, stage_begin, lane);
  CpAsyncCommit();
  while (true) {
    Walk n = w;
    n.first += tiles_per_pass * kTileTokens;
    const bool more = n.first < n.end || StartItem<kGateUp>(p, touched, num_tiles, num_items, w.item + stride, n);
    NextUnit next;
    if (more) {
      next.e = n.e;
      next.row0 = n.row0;
      next.stage = stage_begin;
    }
    if (split != 1) {
      SplitItemPass<kGateUp, kWholeStages>(p, lane_entry, table, slot, pos, w, stage_begin, stage_end, next, lane,
                                           warp, split);
    } else if (w.end - w.first > kTileTokens) {
      ItemPass<kGateUp, kMaxTokenTiles, kWholeStages>(p, lane_entry, slot, pos, w, num_stages, next, lane);
    } else {
      ItemPass<kGateUp, 1, kWholeStages>(p, lane_entry, slot, pos, w, num_stages, next, lane);
    }
    if (!more) break;
    w = n;
  }
#endif
}

}  // namespace peregrine::kernels::moe_mma
