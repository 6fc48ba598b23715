#include "backend/cuda/uploader.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_status.h"

namespace peregrine::cuda {

void ParallelRanges(size_t n, int threads, const std::function<void(size_t, size_t)>& fn) {
  const size_t t = std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, std::max<size_t>(n, 1));
  const size_t per = (n + t - 1) / t;
  std::vector<std::thread> pool;
  for (size_t i = 1; i < t; ++i) {
    const size_t begin = std::min(n, i * per), end = std::min(n, begin + per);
    if (begin < end) pool.emplace_back(fn, begin, end);
  }
  fn(0, std::min(n, per));
  for (std::thread& th : pool) th.join();
}

Result<std::unique_ptr<Uploader>> Uploader::Create(cudaStream_t stream, size_t chunk_bytes, int threads) {
  std::unique_ptr<Uploader> u(new Uploader());
  u->stream_ = stream;
  u->chunk_ = std::max<size_t>(chunk_bytes, 1 << 20);
  u->threads_ = threads > 0 ? threads : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  for (int i = 0; i < 2; ++i) {
    PG_ASSIGN_OR_RETURN(u->staging_[static_cast<size_t>(i)], PinnedHostBuffer::Allocate(u->chunk_));
    PG_ASSIGN_OR_RETURN(u->copied_[static_cast<size_t>(i)], Event::Create(false));
  }
  return u;
}

Uploader::~Uploader() {
  for (size_t b = 0; b < 2; ++b)
    if (busy_[b]) (void)copied_[b].Synchronize();
}

Status Uploader::Upload(void* dst, const void* src, size_t bytes) {
  const auto* from = static_cast<const uint8_t*>(src);
  return UploadFilled(dst, bytes, [from](uint8_t* out, size_t offset, size_t n) { std::memcpy(out, from + offset, n); });
}

Status Uploader::UploadFilled(void* dst, size_t bytes, const Fill& fill, size_t granule) {
  granule = std::max<size_t>(granule, 1);
  const size_t chunk = std::max(granule, chunk_ / granule * granule);
  for (size_t at = 0; at < bytes; at += chunk) {
    const size_t n = std::min(chunk, bytes - at);
    const size_t b = static_cast<size_t>(next_);
    next_ ^= 1;
    // The buffer's previous copy must have left it before it is refilled.
    if (busy_[b]) PG_RETURN_IF_ERROR(copied_[b].Synchronize());
    auto* out = staging_[b].as<uint8_t>();
    const size_t granules = (n + granule - 1) / granule;
    // A thread per MiB at most: small pieces are not worth a thread.
    const int threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads_), (n >> 20) + 1));
    ParallelRanges(granules, threads, [&](size_t g0, size_t g1) {
      const size_t begin = g0 * granule, end = std::min(n, g1 * granule);
      if (begin < end) fill(out + begin, at + begin, end - begin);
    });
    PG_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(static_cast<uint8_t*>(dst) + at, out, n, cudaMemcpyHostToDevice, stream_));
    PG_RETURN_IF_ERROR(copied_[b].Record(stream_));
    busy_[b] = true;
  }
  return Status::Ok();
}

}  // namespace peregrine::cuda
