// A caching device allocator: size-class free lists over a raw source (cudaMalloc in
// production, a fake in tests). Once the sizes a step uses have been seen, a step allocates
// without touching the driver, so allocation is cheap and safe inside CUDA graph capture.
//
// Ownership and ordering: one allocator serves one stream. A freed block goes straight back
// to its free list; reusing it for the next allocation is safe because every kernel that
// used it was enqueued earlier on the same stream. Work on other streams must finish (or be
// ordered with an event) before its buffers are freed. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "base/status.h"

namespace peregrine::cuda {

// Where the caching allocator gets raw memory. Allocate returns memory aligned to at least
// 256 bytes, or ResourceExhausted; Free takes exactly what Allocate returned.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
};

// cudaMalloc / cudaFree on the current device.
class CudaRawAllocator final : public RawAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
};

struct AllocatorStats {
  size_t bytes_in_use = 0;       // handed out, by size class
  size_t bytes_cached = 0;       // on free lists
  size_t peak_bytes_in_use = 0;
  int64_t num_allocations = 0;   // Allocate calls that succeeded
  int64_t num_cache_hits = 0;    // ... served from a free list
  int64_t num_raw_allocations = 0;
  int64_t num_raw_frees = 0;
};

class CachingAllocator;

// Move-only owner of one block; returns it to the allocator's free list when destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }        // what was asked for
  size_t capacity() const { return capacity_; }  // the size class
  bool empty() const { return data_ == nullptr; }
  // Returns the block to its allocator now.
  void Reset();

 private:
  friend class CachingAllocator;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;
  CachingAllocator* owner_ = nullptr;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(RawAllocator& raw) : raw_(raw) {}
  // Returns every cached block to the raw allocator. Every DeviceBuffer must be gone first.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (rounded up to its size class), 256-byte aligned. Zero bytes
  // gives an empty buffer. ResourceExhausted when the raw allocator fails even after the
  // cache was trimmed; the allocator is unchanged then.
  Result<DeviceBuffer> Allocate(size_t bytes);
  // Returns every cached (free) block to the raw allocator.
  void Trim();
  AllocatorStats stats() const;

  // The size class of a request: powers of two from 512 B up to 1 MiB, then multiples of
  // 2 MiB, so that a request never wastes more than half (small) or 2 MiB (large).
  static size_t SizeClass(size_t bytes);

 private:
  friend class DeviceBuffer;
  void Release(void* ptr, size_t capacity);
  void TrimLocked();

  RawAllocator& raw_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  AllocatorStats stats_;
};

// Move-only owner of page-locked host memory (cudaMallocHost): the host end of asynchronous
// copies that must not wait for the stream (pageable memory would make a device-to-host copy
// synchronous).
class PinnedHostBuffer {
 public:
  // ResourceExhausted when the host cannot pin `bytes`; zero bytes gives an empty buffer.
  static Result<PinnedHostBuffer> Allocate(size_t bytes);
  PinnedHostBuffer() = default;
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept { *this = std::move(other); }
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace peregrine::cuda
