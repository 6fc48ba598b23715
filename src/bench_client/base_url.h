// The server address a benchmark talks to, parsed once from --base-url.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace peregrine::bench_client {

struct BaseUrl {
  std::string host;         // a name or an address; IPv6 without brackets
  std::string port;         // decimal; "80" when the URL names none
  std::string path_prefix;  // "" or "/prefix" without a trailing slash, prepended to every target
};

// Accepts "http://host[:port][/prefix]". Fails with kInvalidArgument on anything else and with
// kUnimplemented on "https://" (this client speaks plain HTTP/1.1 only).
Result<BaseUrl> ParseBaseUrl(std::string_view url);

// The Host header for `url`: the host (bracketed when IPv6) and the port unless it is 80.
std::string HostHeader(const BaseUrl& url);

}  // namespace peregrine::bench_client
