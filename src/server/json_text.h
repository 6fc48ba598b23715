// The one way the server turns JSON into text: invalid UTF-8 in a string can never throw
// (it becomes U+FFFD), so no request bytes can crash a dump.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace peregrine::server {

using Json = nlohmann::ordered_json;

inline std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace peregrine::server
