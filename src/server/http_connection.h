// One HTTP/1.1 connection as a coroutine on one I/O thread: read a request within the limits
// and timeouts, hand it to the router, write what the handler puts in the ResponseChannel
// (a whole response, or a chunked SSE stream), keep the connection alive or close it.
//
// While a response is pending, a read on the socket watches for the client going away: a
// disconnect (or a failed write) marks the channel's client gone, which aborts the engine
// requests. Slowloris clients are closed at the header timeout without a response; a body
// that does not arrive within the body timeout gets 408; oversized bodies and headers get
// 413 / 431 before the rest is read; ambiguous framing (see http_request_parser.h) gets 400 or
// 501. Every such error closes the connection, so nothing after it is read as a request.
// HEAD is routed as GET and answered with GET's headers (its Content-Length) and no body.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>  // before asio/awaitable.hpp, which uses std::exchange without it (1.74)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "server/router.h"
#include "server/server_config.h"
#include "server/serving_context.h"
#include "server/task_queue.h"

namespace peregrine::server {

// The open connections of one I/O thread (used on that thread only), so Stop can close them.
class LiveConnections {
 public:
  uint64_t Add(std::function<void()> close) {
    closers_.emplace(next_, std::move(close));
    return next_++;
  }
  void Remove(uint64_t key) { closers_.erase(key); }
  void CloseAll() {
    auto closers = closers_;  // closing may remove entries
    for (auto& [key, close] : closers) close();
  }
  size_t size() const { return closers_.size(); }

 private:
  uint64_t next_ = 0;
  std::unordered_map<uint64_t, std::function<void()>> closers_;
};

struct ConnectionEnv {
  const ServerConfig* config = nullptr;
  ServingContext* context = nullptr;
  Router* router = nullptr;
  std::shared_ptr<TaskQueue> home;            // this connection's thread
  LiveConnections* live = nullptr;            // this thread's connections
  std::atomic<int>* num_active_exchanges = nullptr;  // requests read, response not yet written
};

boost::asio::awaitable<void> ServeConnection(boost::asio::ip::tcp::socket socket,
                                             ConnectionEnv env);

}  // namespace peregrine::server
