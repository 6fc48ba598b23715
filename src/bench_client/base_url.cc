#include "bench_client/base_url.h"

#include <charconv>

namespace peregrine::bench_client {

namespace {

bool IsValidPort(std::string_view port) {
  int value = 0;
  const char* end = port.data() + port.size();
  auto [ptr, ec] = std::from_chars(port.data(), end, value);
  return ec == std::errc() && ptr == end && value > 0 && value < 65536;
}

}  // namespace

Result<BaseUrl> ParseBaseUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  if (url.starts_with("https://")) return Unimplemented("https is not supported: " + std::string(url));
  if (!url.starts_with(kHttp)) return InvalidArgument("base URL must start with http://: " + std::string(url));
  std::string_view rest = url.substr(kHttp.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  while (path.ends_with('/')) path.remove_suffix(1);

  BaseUrl out;
  out.port = "80";
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("unterminated IPv6 address: " + std::string(url));
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) return InvalidArgument("junk after IPv6 address: " + std::string(url));
      out.port = std::string(after.substr(1));
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) out.port = std::string(authority.substr(colon + 1));
  }
  if (out.host.empty()) return InvalidArgument("base URL has no host: " + std::string(url));
  if (!IsValidPort(out.port)) return InvalidArgument("bad port in base URL: " + std::string(url));
  if (path.find_first_of("?#") != std::string_view::npos) {
    return InvalidArgument("base URL must not carry a query or fragment: " + std::string(url));
  }
  out.path_prefix = std::string(path);
  return out;
}

std::string HostHeader(const BaseUrl& url) {
  std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  if (url.port != "80") host += ":" + url.port;
  return host;
}

}  // namespace peregrine::bench_client
