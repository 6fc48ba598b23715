// Row gather/scatter between two row-major buffers: dst[dst_rows[i]] = src[src_rows[i]].
// The CUDA model runner moves each chunk's window rows from the step's scratch rows into
// the per-request window rings with it. Pairs with a negative index are skipped.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct CopyRowsParams {
  const void* src;           // [num_src_rows, row_bytes]
  void* dst;                 // [num_dst_rows, row_bytes]
  const int32_t* src_rows;   // [n]
  const int32_t* dst_rows;   // [n]
  int64_t n = 0;             // pairs (a host-known maximum; padding pairs are -1)
  int64_t row_bytes = 0;     // a multiple of 16
  int64_t num_src_rows = 0;
  int64_t num_dst_rows = 0;
};

cudaError_t LaunchCopyRows(const CopyRowsParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
