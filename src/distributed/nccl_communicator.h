// The GPU implementation of Communicator: NCCL, loaded at run time (dlopen) so that the
// binary carries no copy of it; the library comes from the CUDA toolkit or the
// nvidia-nccl PyPI wheel (NcclOptions::library, default libnccl.so.2 on the loader's path).
// Buffers are device memory; every call enqueues on `stream` and returns.
#pragma once

#include <memory>
#include <string>

#include "distributed/communicator.h"

namespace peregrine::distributed {

struct NcclOptions {
  std::string library = "libnccl.so.2";
  void* stream = nullptr;  // cudaStream_t the collectives run on (null: the legacy stream)
};

// Rank 0 creates NCCL's unique id and publishes it through the rendezvous; every rank then
// joins (this rank's current CUDA device is its GPU). Unimplemented in builds without CUDA;
// Unavailable when the library cannot be loaded or a rank does not join.
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const Rendezvous& rendezvous, const NcclOptions& options);

// The version of the NCCL that `library` loads (e.g. 22809), or why it does not load.
Result<int> NcclLibraryVersion(const std::string& library);

}  // namespace peregrine::distributed
