// Loads of data a kernel reads exactly once (weights streamed by a decode-sized GEMM): past
// L1 straight to registers, so L1 keeps what the warps re-read (activations). Device code only.
#pragma once

#include <cstdint>

namespace peregrine::kernels {

// 16 bytes at a 16-byte aligned address of read-only global memory.
__device__ __forceinline__ uint4 LoadStreaming16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

}  // namespace peregrine::kernels
