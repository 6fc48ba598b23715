#include "server/http_request_parser.h"

#include <algorithm>

#include <boost/beast/http/error.hpp>

namespace peregrine::server {

namespace http = boost::beast::http;

RequestParser::RequestParser(const ServerLimits& limits) : max_fields_(limits.max_header_fields) {
  header_limit(limits.max_header_bytes);
  body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
}

void RequestParser::on_request_impl(http::verb, string_view method_str, string_view target,
                                    int version, error_code&) {
  request_.method.assign(method_str.data(), method_str.size());
  const std::string_view t(target.data(), target.size());
  request_.path.assign(t.substr(0, t.find('?')));
  version_ = version;
}

void RequestParser::on_response_impl(int, string_view, int, error_code& ec) {
  ec = http::error::bad_version;  // never called for a request parser
}

void RequestParser::on_field_impl(http::field, string_view name, string_view value,
                                  error_code& ec) {
  if (++num_fields_ > max_fields_) {
    has_too_many_fields_ = true;
    ec = http::error::header_limit;
    return;
  }
  std::string lower(name.data(), name.size());
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; });
  if (lower == "expect") {
    std::string v(value.data(), value.size());
    std::transform(v.begin(), v.end(), v.begin(),
                   [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; });
    expects_continue_ = v == "100-continue";
  }
  request_.headers.emplace_back(std::move(lower), std::string(value.data(), value.size()));
}

void RequestParser::on_header_impl(error_code&) {}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                      error_code&) {
  // Beast has already refused a Content-Length above the body limit. Reserve only a little:
  // a client announcing a large body and then trickling must not pin that much memory.
  constexpr std::uint64_t kMaxReserve = 1 << 20;
  if (content_length) request_.body.reserve(static_cast<size_t>(std::min(*content_length, kMaxReserve)));
}

std::size_t RequestParser::on_body_impl(string_view body, error_code&) {
  request_.body.append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code&) {
  request_.body.append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_finish_impl(error_code&) {}

}  // namespace peregrine::server
