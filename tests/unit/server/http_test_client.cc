#include "http_test_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace peregrine::server::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string ClientResponse::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

struct HttpClient::State {
  asio::io_context io;
  tcp::socket socket{io};
  beast::flat_buffer buffer;
  bool is_open = false;
};

HttpClient::HttpClient(uint16_t port) : state_(std::make_unique<State>()) {
  beast::error_code ec;
  state_->socket.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port), ec);
  state_->is_open = !ec;
}

HttpClient::~HttpClient() = default;

bool HttpClient::is_open() const { return state_->is_open; }

ClientResponse HttpClient::Send(std::string_view method, std::string_view target,
                                std::string_view body, const Headers& headers) {
  ClientResponse out;
  if (!state_->is_open) return out;
  http::request<http::string_body> req;
  req.method_string(std::string(method));
  req.target(std::string(target));
  req.version(11);
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [name, value] : headers) req.set(name, value);
  if (!body.empty() || method == "POST") {
    req.body() = std::string(body);
    if (req[http::field::content_type].empty()) req.set(http::field::content_type, "application/json");
    req.prepare_payload();
  }
  beast::error_code ec;
  http::write(state_->socket, req, ec);
  if (ec) {
    state_->is_open = false;
    return out;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::uint64_t{1} << 32);
  http::read(state_->socket, state_->buffer, parser, ec);
  if (ec) {
    state_->is_open = false;
    return out;
  }
  const auto& res = parser.get();
  out.status = static_cast<int>(res.result_int());
  for (const auto& field : res) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    out.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  out.body = res.body();
  if (!res.keep_alive()) state_->is_open = false;
  return out;
}

ClientResponse Fetch(uint16_t port, std::string_view method, std::string_view target,
                     std::string_view body, const Headers& headers) {
  HttpClient client(port);
  return client.Send(method, target, body, headers);
}

ClientResponse PostJson(uint16_t port, std::string_view target, std::string_view body,
                        const Headers& headers) {
  return Fetch(port, "POST", target, body, headers);
}

struct RawConnection::State {
  asio::io_context io;
  tcp::socket socket{io};
};

RawConnection::RawConnection(uint16_t port) : state_(std::make_unique<State>()) {
  beast::error_code ec;
  state_->socket.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port), ec);
}

RawConnection::~RawConnection() = default;

bool RawConnection::Write(std::string_view bytes) {
  beast::error_code ec;
  asio::write(state_->socket, asio::buffer(bytes.data(), bytes.size()), ec);
  return !ec;
}

namespace {

// Waits for readability; returns false on timeout.
bool WaitReadable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

}  // namespace

std::string RawConnection::Read(std::chrono::milliseconds timeout) {
  return ReadUntil({}, timeout);
}

std::string RawConnection::ReadUntil(std::string_view marker, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = state_->socket.native_handle();
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !WaitReadable(fd, left)) break;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (!marker.empty() && out.find(marker) != std::string::npos) break;
  }
  return out;
}

bool RawConnection::WaitClosed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = state_->socket.native_handle();
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !WaitReadable(fd, left)) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
}

void RawConnection::Close() {
  beast::error_code ec;
  state_->socket.close(ec);
}

std::vector<std::string> SseData(std::string_view body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    const std::string_view event = body.substr(pos, end == std::string_view::npos ? body.npos : end - pos);
    if (event.substr(0, 6) == "data: ") out.emplace_back(event.substr(6));
    if (end == std::string_view::npos) break;
    pos = end + 2;
  }
  return out;
}

}  // namespace peregrine::server::testing
