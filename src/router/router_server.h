// `peregrine router`: an OpenAI-compatible front over a list of workers (any servers that
// speak the OpenAI API, Peregrine's own among them). Each request is sent to the worker the
// routing policy picks and its response relayed as it arrives (streams chunk by chunk). A
// request the worker fails before answering (unreachable, a 5xx such as a draining server's
// 503) goes to another worker, up to max_retries times; once its first byte has gone to the
// client it is never retried, and a stream whose worker dies ends with an error event.
// Workers are checked on /health and their /metrics queue read every health_interval; one
// that fails unhealthy_after checks or requests in a row is ejected until a check passes.
//
// Threads: num_threads I/O threads run the client connections (a coroutine each on its own
// strand), the upstream exchanges and the health checks. Start binds and returns; Stop closes
// the listener and the connections and joins the threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "router/routing_policy.h"

namespace peregrine::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 30001;             // 0: any free port (see RouterServer::port)
  std::vector<std::string> worker_urls;  // http://host:port[/prefix]
  RoutingPolicy policy = CacheAware{};
  std::string api_key;               // clients must send "Authorization: Bearer KEY" (empty: open)
  std::string worker_api_key;        // sent to the workers; empty: the client's Authorization is passed on
  int max_retries = 2;               // other workers tried for a request that failed before answering
  double health_interval_s = 2.0;
  int unhealthy_after = 3;           // consecutive failed checks or requests that eject a worker
  double connect_timeout_s = 5.0;
  double request_timeout_s = 600.0;  // a whole upstream exchange
  int64_t max_body_bytes = 32 << 20;
  int num_threads = 4;
  size_t prefix_keys_per_worker = 1 << 16;
  std::string metrics_prefix = "peregrine";
  // Prefill/decode disaggregation (SGLang's --pd-disaggregation): worker_urls are then the
  // decode workers, and each chat or completions request also goes, with a fresh bootstrap
  // room, to one of these prefill workers (chosen by the same policy), whose KV transfer
  // port is bootstrap_port. The decode worker's answer is the client's.
  struct PrefillWorker {
    std::string url;
    uint16_t bootstrap_port = 8998;
  };
  std::vector<PrefillWorker> prefill_workers;
};

class RouterServer {
 public:
  // InvalidArgument for a bad config (no workers, a bad URL); Unavailable when the address
  // cannot be bound.
  static Result<std::unique_ptr<RouterServer>> Start(const RouterConfig& config);
  ~RouterServer();  // Stop()
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  uint16_t port() const;
  void Stop();

 private:
  struct Impl;
  explicit RouterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::router
