// One UCX context and worker for the KV transfer (active messages with wakeup), progressed by
// the one thread that owns it (KvSender's or KvReceiver's); only Wake() may be called from
// other threads. UCX picks the transport per peer: shared memory or TCP on one host, TCP,
// RDMA or CUDA IPC where the installed UCX has them.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "disaggregation/transfer_wire.h"

namespace peregrine::disaggregation {

// Bytes a sent message owns until UCX has sent them.
using SharedBytes = std::shared_ptr<const std::vector<uint8_t>>;

class UcxWorker {
 public:
  // Unavailable when UCX cannot start.
  static Result<std::unique_ptr<UcxWorker>> Create();
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h worker() const { return worker_; }
  Status SetHandler(MessageKind kind, ucp_am_recv_callback_t callback, void* arg);
  // Progresses until UCX is idle, then sleeps until it has events, Wake() is called or
  // timeout_ms pass.
  void ProgressAndWait(int timeout_ms);
  void Wake();
  // Sends one message (header, then `data`); false when the send failed at once. `reply`
  // lets the peer answer on this endpoint (UCX's reply endpoint).
  bool Send(ucp_ep_h ep, const WireHeader& header, SharedBytes data, bool reply);
  // Closes an endpoint, cancelling what it still sends, waits until UCX let it go, then
  // progresses once (see the .cc: a UCX race between two workers of one process).
  void Close(ucp_ep_h ep);

 private:
  UcxWorker() = default;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int ucx_fd_ = -1;
  int wake_fd_ = -1;
};

// "host:port" resolved for UCX's client-server connection (IPv4 or IPv6).
struct SocketAddress {
  std::vector<uint8_t> storage;  // a sockaddr_storage's bytes
  uint32_t length = 0;
};
Result<SocketAddress> Resolve(const std::string& host, uint16_t port);

}  // namespace peregrine::disaggregation
