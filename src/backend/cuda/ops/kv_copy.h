// KV page copies with their checksums (kernels/kv_copy.cuh): the CUDA-IPC transfer's gather
// (pools -> staging) and scatter (staging -> pools).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kernels/kv_copy.cuh"

namespace peregrine::cuda {

// `bytes` from src to dst (dst null: checksum only), at byte `page_offset` of page `page`.
struct KvCopyRange {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t bytes = 0;
  uint64_t page_offset = 0;
  uint64_t page = 0;
};

// The kernel's segments for `ranges`, appended to `segments`. InvalidArgument unless every
// pointer, size and offset is a multiple of 8 bytes.
Status PlanKvCopy(std::span<const KvCopyRange> ranges, std::vector<kernels::KvCopySegment>* segments);

// Runs the planned segments (already copied to the device) and leaves each page's checksum in
// checksums[page] (device memory, [num_pages]).
Status KvCopy(const kernels::KvCopySegment* segments, int64_t num_segments, uint64_t* checksums, int64_t num_pages,
              cudaStream_t stream);

}  // namespace peregrine::cuda
