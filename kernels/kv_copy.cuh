// Copies KV pages piece by piece and checksums them on the way (the CUDA-IPC transfer of
// disaggregated serving: a prefill process gathers a request's regions into its staging
// arena, a decode process scatters them from there into its pools). Each segment copies
// `words` 64-bit words from src to dst and adds their terms of the page checksum
// (runtime/kv_page_checksum.h: sum of Mix(w_i + (i + 1) * step), i = first_word + k) to
// checksums[page]. The sum is of integers, so the result does not depend on the order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct KvCopySegment {
  const void* src = nullptr;  // 8-byte aligned
  void* dst = nullptr;        // 8-byte aligned; may be null (checksum only)
  uint64_t words = 0;         // at most kKvCopyMaxSegmentWords
  uint64_t first_word = 0;    // the segment's first word's index in its page
  uint64_t page = 0;          // < num_pages
};

// Longer pieces are split by the caller (one CTA copies one segment).
inline constexpr uint64_t kKvCopyMaxSegmentWords = 8192;  // 64 KiB

struct KvCopyParams {
  const KvCopySegment* segments = nullptr;  // [num_segments] on the device
  int64_t num_segments = 0;  // < 2^31
  uint64_t* checksums = nullptr;  // [num_pages] on the device, zeroed by the launch
  int64_t num_pages = 0;
};

cudaError_t LaunchKvCopy(const KvCopyParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
