// Internal to StreamClient: one streamed request driven by Beast, and the pool of idle
// kept-alive connections it draws from. Only stream_exchange.cc and stream_client.cc include it,
// so Beast is compiled in two translation units.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bench_client/sse_decoder.h"
#include "bench_client/stream_client.h"

namespace peregrine::bench_client::internal {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using Tcp = boost::asio::ip::tcp;

// Idle connections to one server, each on its own strand. Thread-safe.
class ConnectionPool {
 public:
  ConnectionPool(net::io_context& ioc, Tcp::resolver::results_type endpoints)
      : ioc_(ioc), endpoints_(std::move(endpoints)) {}

  std::unique_ptr<beast::tcp_stream> TakeIdle();  // nullptr when none is idle
  std::unique_ptr<beast::tcp_stream> MakeNew();   // not yet connected; counted as opened
  void PutIdle(std::unique_ptr<beast::tcp_stream> stream);  // stream has no operation pending

  const Tcp::resolver::results_type& endpoints() const { return endpoints_; }
  int64_t num_opened() const { return num_opened_.load(std::memory_order_relaxed); }

 private:
  net::io_context& ioc_;
  const Tcp::resolver::results_type endpoints_;
  std::mutex mu_;
  std::vector<std::unique_ptr<beast::tcp_stream>> idle_;  // guarded by mu_
  std::atomic<int64_t> num_opened_{0};
};

// What every exchange of one client shares; outlives the exchanges.
struct ExchangeContext {
  ConnectionPool* pool = nullptr;
  std::string host_header;
  std::string authorization;  // "" or "Bearer <key>"
  Clock::duration timeout{};
};

// Lives as long as an operation of its own is pending (handlers hold a shared_ptr). Only one
// operation is ever pending, so its state needs no lock even though handlers may run on any
// client thread.
class StreamExchange : public std::enable_shared_from_this<StreamExchange> {
 public:
  StreamExchange(const ExchangeContext& context, const StreamRequest& request, DoneCallback done);
  void Start();

 private:
  void Connect();
  void Write();
  void ReadHeader();
  void ReadBody();
  void OnBody(beast::error_code ec);
  void HandleEvents(Clock::time_point now);
  bool CanRetry() const;
  void Complete(Clock::time_point now);
  void Fail(std::string error);
  void Deliver(Clock::time_point end);

  const ExchangeContext& context_;
  http::request<http::string_body> request_;
  DoneCallback done_;
  Clock::time_point deadline_;
  std::unique_ptr<beast::tcp_stream> stream_;
  bool is_reused_ = false;  // stream_ came from the pool and may have been closed by the server
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 8192> body_buf_{};
  SseDecoder sse_;
  std::vector<std::string> events_;
  std::string error_body_;   // the start of a body that came with a status other than 200
  std::string chunk_error_;  // the first error chunk
  std::optional<int64_t> usage_completion_tokens_;
  bool has_done_ = false;    // "[DONE]" arrived
  bool is_finished_ = false; // the record was delivered
  RequestRecord record_;
};

}  // namespace peregrine::bench_client::internal
