// The collectives one rank of a group runs with the others. Every rank calls the same
// operations in the same order with the same counts; a call returns once this rank's part is
// done (CPU) or enqueued on the communicator's stream (NCCL). Buffers are host memory for the
// CPU implementation and device memory for NCCL.
//
// Errors: a peer that died or stopped answering within the timeout fails the call (Unavailable
// or DeadlineExceeded) and every later one; the group cannot recover, the process must stop.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/dtype.h"
#include "base/status.h"
#include "distributed/parallel_config.h"

namespace peregrine::distributed {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "gloo", "nccl"

  // buf [count] summed element-wise over the ranks, in place; every rank gets the same bits.
  virtual Status AllReduceSum(void* buf, int64_t count, DType dtype) = 0;
  // out [size, count]: row r is rank r's in [count].
  virtual Status AllGather(const void* in, void* out, int64_t count, DType dtype) = 0;
  // in [size, count] summed over the ranks; out [count] gets row `rank()` of the sum.
  virtual Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype) = 0;
  // in [size, count]: row r goes to rank r; out [size, count]: row r came from rank r.
  virtual Status AllToAll(const void* in, void* out, int64_t count, DType dtype) = 0;
  // buf [count] of rank `root` to every rank.
  virtual Status Broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  virtual Status Send(const void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual Status Recv(void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual Status Barrier() = 0;
  // Device implementations: the stream (a cudaStream_t) later calls enqueue on, so a model
  // puts them on the stream its step (or the graph being captured) runs on. Host ones have
  // no stream and ignore it.
  virtual void UseStream(void* stream) { (void)stream; }
};

class TcpStoreServer;

// Where a rank finds the others: rank 0 serves the rendezvous at host:port, every rank
// connects to it. Rank 0 may bring a server it started already (to learn its port before
// starting the other ranks); otherwise it starts one on host:port (port 0: any free port).
struct Rendezvous {
  std::string host = "127.0.0.1";
  int port = 0;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{60000};  // joining, and every collective after
  std::shared_ptr<TcpStoreServer> server;    // rank 0 only, optional
};

// The CPU implementation: Gloo over TCP (processes on one host or several). Unimplemented in
// builds without Gloo. Ignores SIGPIPE in the process, so that a rank that dies fails the
// others' collectives (Unavailable) instead of ending them.
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const Rendezvous& rendezvous);

// Bytes of one element of a collective's dtype; 0 for the sub-byte types, which no collective takes.
int64_t CollectiveElementBytes(DType dtype);

}  // namespace peregrine::distributed
