// The prefill side of the CUDA-IPC KV transfer: one device allocation, exported once with
// cudaIpcGetMemHandle, from which each published request's pages take a slab until the
// decode process has copied them (or the room expired). Allocated before the KV pools, so
// --gpu-memory-utilization covers it.
//
// Threads: Allocate and Free are thread-safe (the engine thread allocates; the transfer
// thread frees when it drops a room).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace peregrine {

class KvStagingArena {
 public:
  // ResourceExhausted when the device has not `bytes` free; Unavailable when the allocation
  // cannot be exported.
  static Result<std::shared_ptr<KvStagingArena>> Create(uint64_t bytes);
  ~KvStagingArena();
  KvStagingArena(const KvStagingArena&) = delete;
  KvStagingArena& operator=(const KvStagingArena&) = delete;

  // The offset of a free slab of at least `bytes` (256-byte aligned), or ResourceExhausted.
  Result<uint64_t> Allocate(uint64_t bytes);
  void Free(uint64_t offset);

  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t used() const;
  const std::vector<uint8_t>& ipc_handle() const { return handle_; }

 private:
  KvStagingArena() = default;

  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::vector<uint8_t> handle_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> slabs_;  // offset -> bytes, of the slabs in use
};

// This host's identity for CUDA IPC (its boot id): a peer with another one cannot open our
// handles.
std::string CudaIpcHostId();

}  // namespace peregrine
