#include "server/http_connection.h"

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

// Beast 1.74's parser trips GCC's -Wmaybe-uninitialized on a boost::optional when built with
// sanitizers (a false positive in library code); keep our own code under the warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#pragma GCC diagnostic pop

#include "server/api_error.h"
#include "server/http_request_parser.h"
#include "server/response_channel.h"

namespace peregrine::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() { f_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
};

// The disconnect watcher's state, shared with its completion handler.
struct Watch {
  bool is_active = false;
  bool is_cancelled = false;
  bool is_gone = false;
  size_t num_read = 0;  // bytes of a pipelined next request
  std::array<char, 4096> bytes{};
};

// The body deadline's state, shared with the timer's handler (which may run after the read).
struct BodyRead {
  bool is_reading = true;
  bool is_late = false;
};

struct Exchange {
  int http_version = 11;
  bool keep_alive = true;
  bool is_head = false;  // HEAD: the headers GET would get, no body
  std::string request_id;
};

std::string SerializeHead(const HttpResponse& r, bool is_stream, bool close,
                          const Exchange& x) {
  std::string out;
  out.reserve(256 + (is_stream ? 0 : r.body.size()));
  out += x.http_version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(r.status);
  out += ' ';
  out += ReasonPhrase(r.status);
  out += "\r\ncontent-type: ";
  out += r.content_type;
  if (!is_stream) {
    out += "\r\ncontent-length: ";
    out += std::to_string(r.body.size());
  } else if (x.http_version != 10) {
    out += "\r\ntransfer-encoding: chunked";
  }
  out += "\r\nx-request-id: ";
  out += x.request_id;
  for (const auto& [name, value] : r.headers) {
    out += "\r\n";
    out += name;
    out += ": ";
    out += value;
  }
  if (close) {
    out += "\r\nconnection: close";
  } else if (x.http_version == 10) {
    out += "\r\nconnection: keep-alive";
  }
  out += "\r\n\r\n";
  if (!is_stream && !x.is_head) out += r.body;
  return out;
}

void AppendChunk(std::string_view data, bool chunked, std::string* out) {
  if (data.empty()) return;
  if (!chunked) {
    out->append(data);
    return;
  }
  char size[24];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  out->append(size, static_cast<size_t>(n));
  out->append(data);
  out->append("\r\n");
}

HttpResponse ParseErrorResponse(const beast::error_code& ec, FramingError framing) {
  ApiError e;
  if (framing == FramingError::kUnsupportedCoding) {
    e.status = 501;
    e.message = "Only the chunked transfer coding is supported.";
    e.code = "unsupported_transfer_encoding";
  } else if (ec == http::error::bad_transfer_encoding || ec == http::error::bad_content_length) {
    e.status = 400;
    e.message = "The request framing is invalid (Transfer-Encoding and Content-Length).";
    e.code = "invalid_framing";
  } else if (ec == http::error::body_limit) {
    e.status = 413;
    e.message = "The request body is too large.";
    e.code = "request_too_large";
  } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    e.status = 431;
    e.message = "The request header fields are too large or too many.";
    e.code = "request_header_fields_too_large";
  } else if (ec == beast::error::timeout) {
    e.status = 408;
    e.message = "The request body was not received in time.";
    e.code = "request_timeout";
  } else {
    e.status = 400;
    e.message = "Malformed HTTP request.";
    e.code = "bad_request";
  }
  HttpResponse r = ErrorResponse(e);
  r.close = true;
  return r;
}

// Ends the sending side and reads (discarding, into a fixed buffer) what the client still
// sends for a moment, so it sees our response rather than a reset.
asio::awaitable<void> CloseGracefully(beast::tcp_stream& stream) {
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::array<char, 8192> sink;
  size_t total = 0;
  stream.expires_after(std::chrono::seconds(2));
  while (!ec && total < (size_t{64} << 20)) {
    total += co_await stream.async_read_some(asio::buffer(sink),
                                             asio::redirect_error(asio::use_awaitable, ec));
  }
  stream.socket().close(ec);
}

}  // namespace

asio::awaitable<void> ServeConnection(tcp::socket socket, ConnectionEnv env) {
  const ServerConfig& config = *env.config;
  const ServerTimeouts& timeouts = config.timeouts;
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer(config.limits.max_header_bytes + 16384);
  asio::steady_timer signal(stream.get_executor(), asio::steady_timer::time_point::max());
  bool is_closing = false;
  const uint64_t live_key = env.live->Add([&] {
    is_closing = true;
    beast::error_code e;
    stream.socket().close(e);
    signal.cancel();
  });
  env.context->metrics.AddConnection(1);
  ScopeExit on_exit([&] {
    env.live->Remove(live_key);
    env.context->metrics.AddConnection(-1);
  });

  for (;;) {
    // Idle keep-alive: wait for the first byte of the next request.
    if (buffer.size() == 0) {
      stream.expires_after(timeouts.idle);
      const size_t n = co_await stream.async_read_some(
          buffer.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || is_closing) co_return;
      buffer.commit(n);
    }
    RequestParser parser(config.limits);
    Exchange x;
    stream.expires_after(timeouts.header);
    co_await http::async_read_header(stream, buffer, parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && !parser.is_done()) {
      if (parser.expects_continue()) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        co_await asio::async_write(stream, asio::buffer(kContinue),
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      if (!ec) {
        // A timer of our own, not the stream's expiry: that would close the socket, and a
        // body that comes too slowly is owed a 408.
        stream.expires_never();
        auto body_read = std::make_shared<BodyRead>();
        asio::steady_timer deadline(stream.get_executor(), timeouts.body);
        deadline.async_wait([body_read, &stream](const beast::error_code& e) {
          if (e || !body_read->is_reading) return;
          body_read->is_late = true;
          beast::error_code ignored;
          stream.socket().cancel(ignored);
        });
        co_await http::async_read(stream, buffer, parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
        body_read->is_reading = false;
        deadline.cancel();
        if (body_read->is_late) ec = beast::error::timeout;
      }
    }
    stream.expires_never();
    if (is_closing) co_return;
    HttpRequest& request = parser.request();
    x.http_version = parser.http_version();
    x.request_id = env.router->ResolveRequestId(request.Header("x-request-id"));
    if (ec) {
      // A slow or silent header (slowloris) gets no answer; the connection just closes.
      if (ec == beast::error::timeout && !parser.is_header_done()) co_return;
      if (ec == http::error::end_of_stream || ec == asio::error::eof) co_return;
      const std::string bytes =
          SerializeHead(ParseErrorResponse(ec, parser.framing_error()), false, true, x);
      stream.expires_after(timeouts.write);
      co_await asio::async_write(stream, asio::buffer(bytes),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (!ec) co_await CloseGracefully(stream);
      co_return;
    }
    x.keep_alive = parser.keep_alive();
    x.is_head = request.method == "HEAD";
    if (x.is_head) request.method = "GET";  // routed as GET; only the body is left out
    request.keep_alive = x.keep_alive;
    request.request_id = x.request_id;
    request.arrival = std::chrono::steady_clock::now();

    auto channel = std::make_shared<ResponseChannel>(env.home);
    channel->Attach([&signal] { signal.cancel(); });
    env.num_active_exchanges->fetch_add(1, std::memory_order_relaxed);
    ScopeExit exchange_exit([&] {
      channel->MarkClientGone();  // no-op for an ended response; detaches `signal`
      env.num_active_exchanges->fetch_sub(1, std::memory_order_relaxed);
    });
    env.router->Handle(std::move(request), channel);

    auto watch = std::make_shared<Watch>();
    if (!channel->is_ended()) {
      watch->is_active = true;
      stream.socket().async_read_some(
          asio::buffer(watch->bytes),
          [watch, channel, &signal](const beast::error_code& e, size_t n) {
            watch->is_active = false;
            if (!e && n > 0) {
              watch->num_read = n;
            } else if (!watch->is_cancelled) {
              watch->is_gone = true;
              channel->MarkClientGone();
            }
            signal.cancel();
          });
    }

    bool is_client_gone = false;
    bool is_stream = false;
    bool close_after = !x.keep_alive;
    for (;;) {
      if (is_closing || watch->is_gone || channel->is_client_gone()) {
        is_client_gone = true;
        break;
      }
      if (!channel->has_output()) {
        co_await signal.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      ChannelOutput out = channel->TakeOutput();
      std::string bytes;
      if (out.has_head) {
        is_stream = out.is_stream;
        close_after = close_after || out.head.close || env.context->is_draining() ||
                      (is_stream && x.http_version == 10);
        bytes = SerializeHead(out.head, is_stream, close_after, x);
      }
      if (is_stream && !x.is_head) {
        AppendChunk(out.data, x.http_version != 10, &bytes);
        if (out.is_end && x.http_version != 10) bytes += "0\r\n\r\n";
      }
      if (!bytes.empty()) {
        stream.expires_after(timeouts.write);
        co_await asio::async_write(stream, asio::buffer(bytes),
                                   asio::redirect_error(asio::use_awaitable, ec));
        stream.expires_never();
        if (ec) {
          is_client_gone = true;
          break;
        }
      }
      if (out.is_end) break;
    }

    if (watch->is_active) {
      watch->is_cancelled = true;
      beast::error_code e;
      stream.socket().cancel(e);
      while (watch->is_active) {
        co_await signal.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
    }
    if (is_client_gone || is_closing || watch->is_gone) {
      channel->MarkClientGone();
      co_return;
    }
    if (watch->num_read > 0) {
      auto dest = buffer.prepare(watch->num_read);
      asio::buffer_copy(dest, asio::buffer(watch->bytes.data(), watch->num_read));
      buffer.commit(watch->num_read);
    }
    if (close_after) {
      co_await CloseGracefully(stream);
      co_return;
    }
  }
}

}  // namespace peregrine::server
