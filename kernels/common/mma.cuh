// Tensor-core and async-copy building blocks (sm_80+): cp.async with zero fill, ldmatrix,
// and the m16n8k16 bf16 MMA with fp32 accumulators. Device code only.
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16, row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][8+2t..], a3 = A[g+8][8+2t..]
//   B (16x8, "col"):      b0 = B[2t..2t+1][g],  b1 = B[8+2t..8+2t+1][g]
//   C (16x8):             c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
#pragma once

#include <cstdint>

namespace peregrine::kernels {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared asynchronously; when `valid` is false nothing is read and
// the 16 bytes are zero-filled (src must still be a mapped address; callers pass a base).
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(smem_dst)), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}

// The same copy to a shared-window address (SmemAddress), for callers that lay out their
// own buffers in the dynamic window.
__device__ __forceinline__ void CpAsync16To(uint32_t smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(src_bytes)
               : "memory");
}

// Copies 8 bytes (8-byte aligned on both sides) global -> shared asynchronously, through L1.
__device__ __forceinline__ void CpAsync8To(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_dst), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lane i supplies the row address for matrix i/8, row i%8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem_row)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem_row)));
}

// Two 8x8 matrices; lanes 0..15 supply the addresses (the others are ignored).
__device__ __forceinline__ void LdMatrixX2(uint32_t (&r)[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SmemAddress(smem_row)));
}

__device__ __forceinline__ void LdMatrixX2Trans(uint32_t (&r)[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SmemAddress(smem_row)));
}

// c += a * b for one m16n8k16 tile, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void MmaBF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Offset (in 16-byte chunks) of chunk `chunk` of row `row` in a tile whose rows are
// `kChunksPerRow` chunks long, XOR-swizzled so that the 8 rows an ldmatrix reads at one
// logical column fall in 8 different bank groups. Needs kChunksPerRow % 8 == 0.
template <int kChunksPerRow>
__device__ __forceinline__ int SwizzledChunk(int row, int chunk) {
  static_assert(kChunksPerRow % 8 == 0, "swizzle needs rows of at least 128 bytes");
  return row * kChunksPerRow + (chunk ^ (row & 7));
}

}  // namespace peregrine::kernels
