// RequestParser: Beast's HTTP/1.1 request parser feeding an HttpRequest directly, with the
// server's limits: header bytes (Beast's header_limit), header field count, and body bytes
// (Beast's body_limit, checked against Content-Length before any body byte is read, and
// while reading a chunked body).
//
// Framing is strict (RFC 9112 section 6), since a lenient reading lets a request hide in a
// body (smuggling): Transfer-Encoding must be exactly `chunked` (once, on HTTP/1.1) and never
// comes with Content-Length. Anything else fails the header with bad_transfer_encoding, and
// framing_error() says which answer it gets; the connection then closes without reading on.
#pragma once

#include <cstdint>
#include <string>

#include <boost/beast/http/basic_parser.hpp>

#include "server/http_message.h"
#include "server/server_config.h"

namespace peregrine::server {

enum class FramingError {
  kNone,
  kUnsupportedCoding,  // a coding besides chunked ("gzip, chunked"): 501
  kInvalid,            // chunked not last or repeated, with Content-Length, on HTTP/1.0: 400
};

class RequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  explicit RequestParser(const ServerLimits& limits);

  HttpRequest& request() { return request_; }
  // The header had more fields than allowed (reported as header_limit).
  bool has_too_many_fields() const { return has_too_many_fields_; }
  bool expects_continue() const { return expects_continue_; }
  int http_version() const { return version_; }
  FramingError framing_error() const { return framing_error_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb method, string_view method_str,
                       string_view target, int version, error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  uint32_t max_fields_;
  uint32_t num_fields_ = 0;
  bool has_too_many_fields_ = false;
  bool expects_continue_ = false;
  bool has_content_length_ = false;
  bool has_transfer_encoding_ = false;
  std::string transfer_encoding_;  // every Transfer-Encoding field, comma-joined
  FramingError framing_error_ = FramingError::kNone;
  int version_ = 11;
  HttpRequest request_;
};

}  // namespace peregrine::server
