// Reading V4's FP8 KV rows (kernels/common/kv_fp8_row.h) in attention kernels, as the bf16
// values a bf16 cache of the dequantised rows would hold: e4m3 times a power of two is exact
// in bf16, so a kernel that reads FP8 rows through these helpers computes exactly what it
// computes over those bf16 rows.
//
// Row pointers to a mix of bf16 rows (window) and FP8 rows (entries) are tagged: bit 0 set
// marks an FP8 row (rows are 16-byte aligned, so the bit is free).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/common/kv_fp8_row.h"

namespace peregrine::kernels {

__device__ __forceinline__ const void* TagFp8Row(const uint8_t* row) {
  return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(row) | 1u);
}
__device__ __forceinline__ bool IsFp8Row(const void* row) { return (reinterpret_cast<uintptr_t>(row) & 1u) != 0; }
__device__ __forceinline__ const uint8_t* Fp8RowBytes(const void* row) {
  return reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(row) & ~static_cast<uintptr_t>(1));
}

// Two e4m3 codes (low byte first) times `scale` as a bf16x2 word (the first value low).
__device__ __forceinline__ uint32_t DequantFp8Pair(uint16_t codes, float scale) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3));
  const float2 f = __half22float2(h);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Values d0, d0 + 1 of an FP8 row as a bf16x2 word (d0 even; the nope width even).
__device__ __forceinline__ uint32_t Fp8RowPair(const uint8_t* row, const KvFp8RowLayout& layout, int d0) {
  const int nope = layout.nope();
  if (d0 >= nope) return *reinterpret_cast<const uint32_t*>(row + layout.rope_offset() + 2 * (d0 - nope));
  const float scale = KvFp8Scale(row[layout.scale_offset() + d0 / kKvFp8Block]);
  return DequantFp8Pair(*reinterpret_cast<const uint16_t*>(row + d0), scale);
}

// Eight e4m3 codes (low byte first) times `scale` as four bf16x2 words.
__device__ __forceinline__ uint4 DequantFp8Eight(uint2 codes, float scale) {
  return make_uint4(DequantFp8Pair(static_cast<uint16_t>(codes.x & 0xffffu), scale),
                    DequantFp8Pair(static_cast<uint16_t>(codes.x >> 16), scale),
                    DequantFp8Pair(static_cast<uint16_t>(codes.y & 0xffffu), scale),
                    DequantFp8Pair(static_cast<uint16_t>(codes.y >> 16), scale));
}

// Values d0 .. d0 + 7 of an FP8 row as four bf16x2 words (d0 a multiple of 8).
__device__ __forceinline__ uint4 Fp8RowChunk(const uint8_t* row, const KvFp8RowLayout& layout, int d0) {
  const int nope = layout.nope();
  if (d0 + 8 <= nope)  // 64 % 8 == 0: one scale block
    return DequantFp8Eight(*reinterpret_cast<const uint2*>(row + d0),
                           KvFp8Scale(row[layout.scale_offset() + d0 / kKvFp8Block]));
  if (d0 >= nope && (d0 - nope) % 8 == 0)
    return *reinterpret_cast<const uint4*>(row + layout.rope_offset() + 2 * (d0 - nope));
  return make_uint4(Fp8RowPair(row, layout, d0), Fp8RowPair(row, layout, d0 + 2), Fp8RowPair(row, layout, d0 + 4),
                    Fp8RowPair(row, layout, d0 + 6));
}

}  // namespace peregrine::kernels
