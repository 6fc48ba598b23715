#include "backend/cuda/allocator.h"

#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/cuda_status.h"
#include "base/check.h"

namespace peregrine::cuda {

Result<void*> CudaRawAllocator::Allocate(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory is not sticky; keep later calls clean
    if (error == cudaErrorMemoryAllocation)
      return ResourceExhausted("cudaMalloc of " + std::to_string(bytes) + " bytes: out of device memory");
    return CudaStatus(error, "cudaMalloc");
  }
  return ptr;
}

void CudaRawAllocator::Free(void* ptr) {
  // A failure here means the context is already broken; the next checked call reports it.
  (void)cudaFree(ptr);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    capacity_ = other.capacity_;
    owner_ = other.owner_;
    other.data_ = nullptr;
    other.bytes_ = other.capacity_ = 0;
    other.owner_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr && owner_ != nullptr) owner_->Release(data_, capacity_);
  data_ = nullptr;
  bytes_ = capacity_ = 0;
  owner_ = nullptr;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  PG_CHECK(stats_.bytes_in_use == 0, "CachingAllocator destroyed while buffers are alive");
  TrimLocked();
}

size_t CachingAllocator::SizeClass(size_t bytes) {
  constexpr size_t kMin = 512;
  constexpr size_t kSmallMax = size_t{1} << 20;
  constexpr size_t kLargeStep = size_t{2} << 20;
  if (bytes <= kMin) return kMin;
  if (bytes <= kSmallMax) {
    size_t c = kMin;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

Result<DeviceBuffer> CachingAllocator::Allocate(size_t bytes) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  const size_t capacity = SizeClass(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  auto it = free_.find(capacity);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= capacity;
    ++stats_.num_cache_hits;
  } else {
    Result<void*> raw = raw_.Allocate(capacity);
    if (!raw.ok() && stats_.bytes_cached > 0) {
      // Cached blocks of other classes may be what stands in the way.
      TrimLocked();
      raw = raw_.Allocate(capacity);
    }
    if (!raw.ok()) return raw.status();
    ptr = *raw;
    ++stats_.num_raw_allocations;
  }
  ++stats_.num_allocations;
  stats_.bytes_in_use += capacity;
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  buffer.data_ = ptr;
  buffer.bytes_ = bytes;
  buffer.capacity_ = capacity;
  buffer.owner_ = this;
  return buffer;
}

void CachingAllocator::Release(void* ptr, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[capacity].push_back(ptr);
  stats_.bytes_in_use -= capacity;
  stats_.bytes_cached += capacity;
}

void CachingAllocator::Trim() {
  std::lock_guard<std::mutex> lock(mu_);
  TrimLocked();
}

void CachingAllocator::TrimLocked() {
  for (auto& [capacity, blocks] : free_) {
    for (void* ptr : blocks) {
      raw_.Free(ptr);
      ++stats_.num_raw_frees;
      stats_.bytes_cached -= capacity;
    }
    blocks.clear();
  }
  free_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Result<PinnedHostBuffer> PinnedHostBuffer::Allocate(size_t bytes) {
  PinnedHostBuffer b;
  if (bytes == 0) return b;
  if (cudaMallocHost(&b.data_, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    b.data_ = nullptr;
    return ResourceExhausted("cannot pin " + std::to_string(bytes) + " bytes of host memory");
  }
  b.bytes_ = bytes;
  return b;
}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

}  // namespace peregrine::cuda
