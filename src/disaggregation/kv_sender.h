// KvSender: the prefill server's side of the KV transfer. The engine publishes each finished
// request's KV under its room (the id the router gave the request); a decode server that
// holds the deployment's secret pulls the room once, page by page, and the room is gone. A
// pull that arrives before its room is published waits for it; a room nobody pulls within
// expiry_s is dropped (a later pull hears that it expired). Device pages (CUDA IPC) are
// kept after the pull until the decode server releases them, or for 10 x expiry_s more; a
// room id published again while its device pages are kept is answered with an error.
//
// Threads: one thread owns the UCX worker (accepts, answers pulls, sends pages, expires
// rooms); Publish and stats are thread-safe and never block on the network.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "scheduler/engine_request.h"

namespace peregrine::disaggregation {

struct KvSenderConfig {
  std::string host = "127.0.0.1";  // the interface the transfer port is bound to
  uint16_t port = 8998;            // 0: any free port (KvSender::port)
  std::string secret;              // shared by the deployment's servers; non-empty
  double expiry_s = 60.0;          // how long a room (or a pull waiting for one) is kept
  // Host bytes the published rooms may hold; past it the oldest rooms are dropped (their
  // pulls hear why) before a new one is kept.
  uint64_t max_held_bytes = uint64_t{16} << 30;
  // Test hook of the fault tests: "corrupt" flips a byte of every room's last page after
  // its digest was taken; "drop" publishes nothing (pulls time out). Empty: none.
  std::string fault;
};

struct KvSenderStats {
  int64_t rooms_published = 0;
  int64_t rooms_sent = 0;
  int64_t rooms_expired = 0;
  int64_t rooms_dropped = 0;  // over max_held_bytes
  int64_t rooms_released = 0;  // device pages the decode server said it had copied
  int64_t pulls_refused = 0;   // bad MAC or malformed messages
  int64_t bytes_sent = 0;
};

class KvSender {
 public:
  // InvalidArgument for a bad config; Unavailable when UCX cannot start or bind.
  static Result<std::unique_ptr<KvSender>> Start(const KvSenderConfig& config);
  ~KvSender();  // stops the thread, closes every endpoint
  KvSender(const KvSender&) = delete;
  KvSender& operator=(const KvSender&) = delete;

  uint16_t port() const;
  // The room's KV, or why the request has none (sent to the puller as the error).
  void Publish(uint64_t room, Result<TransferredKv> kv);
  KvSenderStats stats() const;

  struct Impl;

 private:
  explicit KvSender(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::disaggregation
