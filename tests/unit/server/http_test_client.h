// A real HTTP/1.1 client for the server tests (Beast, synchronous), plus a raw TCP connection
// for malformed and abusive traffic. Only http_test_client.cc includes Beast.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace peregrine::server::testing {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct ClientResponse {
  int status = 0;            // 0: no response (connection failed or closed)
  Headers headers;           // names lower-cased
  std::string body;          // chunked bodies are decoded
  std::string Header(std::string_view lower_name) const;
};

// A keep-alive connection sending requests one after another.
class HttpClient {
 public:
  explicit HttpClient(uint16_t port);
  ~HttpClient();
  ClientResponse Send(std::string_view method, std::string_view target, std::string_view body = {},
                      const Headers& headers = {});
  bool is_open() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One request on a fresh connection.
ClientResponse Fetch(uint16_t port, std::string_view method, std::string_view target,
                     std::string_view body = {}, const Headers& headers = {});
ClientResponse PostJson(uint16_t port, std::string_view target, std::string_view body,
                        const Headers& headers = {});

// A raw socket: write any bytes, read with timeouts.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port);
  ~RawConnection();
  // False when the peer has closed or reset the connection.
  bool Write(std::string_view bytes);
  // Reads what arrives within `timeout` (stops early at EOF). Empty when nothing came.
  std::string Read(std::chrono::milliseconds timeout);
  // Reads until `marker` appears, EOF, or the timeout; returns everything read.
  std::string ReadUntil(std::string_view marker, std::chrono::milliseconds timeout);
  // True when the server closes the connection within `timeout` (EOF or reset).
  bool WaitClosed(std::chrono::milliseconds timeout);
  void Close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The payloads of `data: ...` events of an SSE body, in order.
std::vector<std::string> SseData(std::string_view body);

}  // namespace peregrine::server::testing
