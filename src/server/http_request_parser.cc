#include "server/http_request_parser.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include <boost/beast/http/error.hpp>

namespace peregrine::server {

namespace http = boost::beast::http;

namespace {

std::string Lowered(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; });
  return out;
}

// The codings of a Transfer-Encoding list, lower-cased and trimmed; empty members dropped.
std::vector<std::string> Codings(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) out.push_back(Lowered(item));
    start = end + 1;
  }
  return out;
}

}  // namespace

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
  std::string lower = Lowered(std::string_view(name.data(), name.size()));
  const std::string_view v(value.data(), value.size());
  if (lower == "expect") {
    expects_continue_ = Lowered(v) == "100-continue";
  } else if (lower == "content-length") {
    has_content_length_ = true;
  } else if (lower == "transfer-encoding") {
    if (has_transfer_encoding_) transfer_encoding_ += ',';
    has_transfer_encoding_ = true;
    transfer_encoding_.append(v);
  }
  request_.headers.emplace_back(std::move(lower), std::string(value.data(), value.size()));
}

void RequestParser::on_header_impl(error_code& ec) {
  if (!has_transfer_encoding_) return;
  const std::vector<std::string> codings = Codings(transfer_encoding_);
  const auto num_chunked = std::count(codings.begin(), codings.end(), "chunked");
  if (has_content_length_ || version_ < 11 || codings.empty() || codings.back() != "chunked" ||
      num_chunked != 1) {
    framing_error_ = FramingError::kInvalid;
  } else if (codings.size() > 1) {
    framing_error_ = FramingError::kUnsupportedCoding;
  }
  if (framing_error_ != FramingError::kNone) ec = http::error::bad_transfer_encoding;
}

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
