// Plain HTTP request/response values shared by the connection (Beast) and the handlers
// (no Beast or Asio here, so the handlers stay cheap to compile and easy to test).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace peregrine::server {

struct HttpRequest {
  std::string method;                                   // as sent ("GET", "POST", ...)
  std::string path;                                     // target without the query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string request_id;                               // echoed in x-request-id
  bool keep_alive = true;
  std::chrono::steady_clock::time_point arrival;        // when the request was complete

  // The first value of header `lower_name`, or empty.
  std::string_view Header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers) {
      if (name == lower_name) return value;
    }
    return {};
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  bool close = false;                                   // ask the connection to close after it
};

// Standard reason phrase for the status codes this server sends.
std::string_view ReasonPhrase(int status);

}  // namespace peregrine::server
