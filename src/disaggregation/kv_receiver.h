// KvReceiver: the decode server's side of the KV transfer. Pull connects to a prefill
// server's transfer port, asks for a room with the deployment's secret and receives the meta
// and every page, checking the meta's MAC and each page's SHA-256 digest. `done` is called
// exactly once: with the KV, or with why there is none (Unavailable: the prefill server is
// gone or answered with an error; DataLoss: a page failed its digest or its size;
// DeadlineExceeded: nothing complete within timeout_s). Messages of a pull that has ended
// are ignored. A meta of device pages (CUDA IPC) ends the pull at once with them (the
// decode runner copies and checks them); when the last reference to them is dropped, the
// receiver tells the prefill server, which frees them.
//
// Threads: one thread owns the UCX worker and calls every `done`; Pull and stats are
// thread-safe and never block on the network.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "scheduler/engine_request.h"

namespace peregrine::disaggregation {

struct KvReceiverConfig {
  std::string secret;       // non-empty
  double timeout_s = 60.0;  // per pull, from the call (covers the prefill's own compute)
};

struct KvReceiverStats {
  int64_t pulls_started = 0;
  int64_t pulls_done = 0;
  int64_t pulls_failed = 0;
  int64_t bytes_received = 0;
  double seconds = 0.0;  // of the successful pulls, from the call to the last page
};

class KvReceiver {
 public:
  using Done = std::function<void(Result<TransferredKv>)>;

  static Result<std::unique_ptr<KvReceiver>> Start(const KvReceiverConfig& config);
  ~KvReceiver();  // fails the pulls in flight (Unavailable) and stops the thread
  KvReceiver(const KvReceiver&) = delete;
  KvReceiver& operator=(const KvReceiver&) = delete;

  void Pull(std::string host, uint16_t port, uint64_t room, Done done);
  KvReceiverStats stats() const;

  struct Impl;

 private:
  explicit KvReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::disaggregation
