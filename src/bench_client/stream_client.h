// An asynchronous HTTP/1.1 client that streams generation requests and records their timing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "bench_client/base_url.h"
#include "bench_client/request_record.h"

namespace peregrine::bench_client {

struct ClientOptions {
  BaseUrl base_url;
  std::string api_key;             // sent as "Authorization: Bearer <key>" when not empty
  int num_threads = 2;             // threads running the event loop; each drives many streams
  double request_timeout_s = 600;  // whole-request deadline, connect to last byte
};

struct StreamRequest {
  std::string target;  // path with the base URL's prefix, e.g. "/v1/completions"
  std::string body;    // JSON
};

using DoneCallback = std::function<void(RequestRecord)>;

// Owns an event loop on `num_threads` threads and a pool of kept-alive connections to one server.
// Every request is a POST streamed as server-sent events; connections are reused after a response
// that ends cleanly, and a request that finds its reused connection closed by the server is
// retried once on a new one. Thread-safe: Submit may be called from any thread, including from a
// DoneCallback.
class StreamClient {
 public:
  // Resolves the host once. Fails with kUnavailable when it cannot be resolved and with
  // kInvalidArgument on bad options.
  static Result<std::unique_ptr<StreamClient>> Create(const ClientOptions& options);

  // Stops the event loop and joins its threads. Requests still in flight are dropped without
  // their callbacks; callers wait for their requests before destroying the client.
  ~StreamClient();
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  // Starts `request` now (send_time is taken here); `done` runs exactly once, on a client thread,
  // with the record, successful or not. `done` must not block for long: it holds up other streams.
  void Submit(const StreamRequest& request, DoneCallback done);

  // A plain GET (e.g. "/v1/models"), blocking the caller; returns the body. Fails with
  // kUnavailable on transport errors, timeouts and any status other than 200.
  Result<std::string> Get(std::string_view target);

  // TCP connections opened so far (keep-alive makes this smaller than the requests sent).
  int64_t num_connections_opened() const;

 private:
  struct Impl;
  explicit StreamClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::bench_client
