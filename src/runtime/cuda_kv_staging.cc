#include "runtime/cuda_kv_staging.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "backend/cuda/cuda_status.h"

namespace peregrine {

namespace {

constexpr uint64_t kAlign = 256;

}  // namespace

Result<std::shared_ptr<KvStagingArena>> KvStagingArena::Create(uint64_t bytes) {
  if (bytes == 0) return InvalidArgument("the KV staging arena needs at least one byte");
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  std::shared_ptr<KvStagingArena> a(new KvStagingArena());
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return ResourceExhausted("cannot allocate " + std::to_string(bytes >> 20) + " MiB of device memory for KV staging");
  }
  a->base_ = static_cast<uint8_t*>(p);
  a->bytes_ = bytes;
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable("the KV staging arena cannot be shared with other processes (cudaIpcGetMemHandle)");
  }
  a->handle_.assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof h);
  return a;
}

KvStagingArena::~KvStagingArena() {
  if (base_ != nullptr) (void)cudaFree(base_);
}

Result<uint64_t> KvStagingArena::Allocate(uint64_t bytes) {
  bytes = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t at = 0;  // first fit, in offset order
  for (const auto& [offset, size] : slabs_) {
    if (offset - at >= bytes) break;
    at = offset + size;
  }
  if (at + bytes > bytes_)
    return ResourceExhausted("the KV staging arena has no " + std::to_string(bytes) + " free bytes in a row");
  slabs_.emplace(at, bytes);
  return at;
}

void KvStagingArena::Free(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.erase(offset);
}

uint64_t KvStagingArena::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [offset, size] : slabs_) n += size;
  return n;
}

std::string CudaIpcHostId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (!id.empty()) return id;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) return name;
  return "unknown";
}

}  // namespace peregrine
