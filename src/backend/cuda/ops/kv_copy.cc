#include "backend/cuda/ops/kv_copy.h"

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_status.h"

namespace peregrine::cuda {

namespace {

bool Aligned8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

}  // namespace

Status PlanKvCopy(std::span<const KvCopyRange> ranges, std::vector<kernels::KvCopySegment>* segments) {
  for (const KvCopyRange& r : ranges) {
    if (r.bytes % 8 != 0 || r.page_offset % 8 != 0 || !Aligned8(r.src) || !Aligned8(r.dst))
      return InvalidArgument("a KV copy range of " + std::to_string(r.bytes) +
                             " bytes is not made of aligned 64-bit words");
    if (r.bytes > 0 && r.src == nullptr) return InvalidArgument("a KV copy range without a source");
    const uint64_t words = r.bytes / 8;
    for (uint64_t at = 0; at < words; at += kernels::kKvCopyMaxSegmentWords) {
      kernels::KvCopySegment s;
      s.src = static_cast<const uint64_t*>(r.src) + at;
      s.dst = r.dst != nullptr ? static_cast<uint64_t*>(r.dst) + at : nullptr;
      s.words = std::min(kernels::kKvCopyMaxSegmentWords, words - at);
      s.first_word = r.page_offset / 8 + at;
      s.page = r.page;
      segments->push_back(s);
    }
  }
  return Status::Ok();
}

Status KvCopy(const kernels::KvCopySegment* segments, int64_t num_segments, uint64_t* checksums, int64_t num_pages,
              cudaStream_t stream) {
  if (num_segments > 0 && segments == nullptr) return InvalidArgument("kv_copy: no segments");
  if (num_pages > 0 && checksums == nullptr) return InvalidArgument("kv_copy: no checksums");
  kernels::KvCopyParams p;
  p.segments = segments;
  p.num_segments = num_segments;
  p.checksums = checksums;
  p.num_pages = num_pages;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchKvCopy(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
