// The text a generation request is routed by (its prompt's prefix decides cache affinity):
// completions' "prompt" (a string, strings, or token ids), chat's "messages" (role and text
// of each, in order). Bodies that are not such JSON route by their raw bytes; the worker
// answers them with its own error.
#pragma once

#include <string>
#include <string_view>

namespace peregrine::router {

std::string RoutingText(std::string_view body);

}  // namespace peregrine::router
