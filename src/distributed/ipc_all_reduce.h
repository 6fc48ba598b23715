// The custom all-reduce of one host's GPUs: each rank's staging buffer and signals mapped
// into every other rank over CUDA IPC, summed by kernels/all_reduce (one-shot or two-shot),
// for the small bf16/f32 sums of tensor parallelism (a sub-layer's output at decode batches),
// where NCCL's latency dominates. It is a kernel on the caller's stream, so it runs inside
// captured CUDA graphs like any other. NCCL stays the path for everything else.
//
// Ownership: IpcAllReduce owns its device allocation and the peers' mappings; one per process
// and group, used from the step's thread, as the Communicator it sits beside.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "distributed/communicator.h"

namespace peregrine::distributed {

struct IpcAllReduceOptions {
  int64_t max_bytes = int64_t{8} << 20;           // larger sums go to NCCL
  int64_t one_shot_max_bytes = int64_t{256} << 10;  // up to this (and always at 2 ranks): one-shot
  std::chrono::milliseconds timeout{30000};        // a peer absent this long fails the step
};

// Every rank's bytes, in rank order, for this rank's `mine` (all ranks call it together with
// the same length). Setup only: the handles and whether each rank could map the others.
using IpcExchange = std::function<Result<std::vector<std::vector<char>>>(const std::vector<char>& mine)>;

class IpcAllReduce {
 public:
  // Allocates this rank's buffers on the current device, exchanges IPC handles, maps the
  // peers'. Unavailable (on every rank alike) when any rank cannot map a peer's memory.
  static Result<std::unique_ptr<IpcAllReduce>> Create(int rank, int size, const IpcAllReduceOptions& options,
                                                      const IpcExchange& exchange);
  ~IpcAllReduce();
  IpcAllReduce(const IpcAllReduce&) = delete;
  IpcAllReduce& operator=(const IpcAllReduce&) = delete;

  // Whether a sum of `count` elements of `dtype` takes this path.
  bool Takes(int64_t count, DType dtype) const;
  // buf [count] (device memory of this rank) summed over the ranks in place; enqueued on
  // `stream` (a cudaStream_t). Only for what Takes() accepts.
  Status AllReduceSum(void* buf, int64_t count, DType dtype, void* stream);

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  IpcAllReduce(int rank, int size, const IpcAllReduceOptions& options);

  int rank_, size_;
  IpcAllReduceOptions options_;
  void* own_ = nullptr;            // signals, then the staging buffer
  std::vector<void*> mapped_;      // [size]: each rank's allocation as this rank sees it
};

// The exchange over a device group (NCCL): an all-gather of device buffers on the legacy
// stream, synchronised (the group is left on that stream). `group` must outlive it.
IpcExchange DeviceGroupExchange(Communicator& group);

// A Communicator that sums what IpcAllReduce takes through it and passes everything else
// (and UseStream) to `group`, a device communicator (NCCL) of ranks on one host. Falls back
// to `group` alone, with the reason in *why_not, when the IPC path cannot be set up.
std::unique_ptr<Communicator> WithIpcAllReduce(std::unique_ptr<Communicator> group, const IpcAllReduceOptions& options,
                                               std::string* why_not);

}  // namespace peregrine::distributed
