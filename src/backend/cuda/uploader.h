// Host-to-device uploads at the host's memory bandwidth (loading checkpoints): each chunk
// of the source is copied by several threads into one of two pinned buffers while the
// other buffer's asynchronous copy runs on the stream, so reading the (mapped, page-cached)
// source and the PCIe transfer overlap. A chunk may be transformed on its way (bf16 scaled,
// f32 narrowed): the transform writes the pinned buffer instead of a plain copy.
//
// Work on `stream` after an Upload sees the uploaded bytes; the host may reuse or unmap the
// source as soon as Upload returns. Not thread-safe; one uploader per loader.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cuda/allocator.h"
#include "backend/cuda/stream.h"
#include "base/status.h"

namespace peregrine::cuda {

// Runs fn(begin, end) over [0, n) split into `threads` contiguous ranges (the calling thread
// takes one); returns when all are done.
void ParallelRanges(size_t n, int threads, const std::function<void(size_t, size_t)>& fn);

class Uploader {
 public:
  // `threads` <= 0: the host's cores, at most 16.
  static Result<std::unique_ptr<Uploader>> Create(cudaStream_t stream, size_t chunk_bytes = size_t{64} << 20,
                                                  int threads = 0);
  // Waits for the copies still reading the pinned buffers (an upload that failed half way).
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  // dst[0, bytes) = src[0, bytes).
  Status Upload(void* dst, const void* src, size_t bytes);
  // dst[0, bytes) = what fill(out, offset, n) writes for each piece [offset, offset + n) of the
  // destination (called on several threads at once, for disjoint pieces).
  using Fill = std::function<void(uint8_t* out, size_t offset, size_t n)>;
  Status UploadFilled(void* dst, size_t bytes, const Fill& fill, size_t granule = 1);
  int threads() const { return threads_; }

 private:
  Uploader() = default;

  cudaStream_t stream_ = nullptr;
  size_t chunk_ = 0;
  int threads_ = 1;
  std::array<PinnedHostBuffer, 2> staging_;
  std::array<Event, 2> copied_;
  std::array<bool, 2> busy_{false, false};
  int next_ = 0;
};

}  // namespace peregrine::cuda
