// Prefill/decode disaggregation at the router: one chat or completions request becomes two
// bodies, both naming the prefill worker's KV transfer port and a fresh room (SGLang's
// bootstrap_host / bootstrap_port / bootstrap_room). The prefill worker's copy is not
// streamed (its one-token answer is read and dropped); the decode worker's copy is the
// client's request, answered to the client.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace peregrine::router {

struct PdBodies {
  std::string prefill;
  std::string decode;
};

// The body parsed once (nlohmann::json, not ordered_json: a map, so a hostile body of many
// keys costs O(n log n); the workers do not care about key order); nullopt when it is not a
// JSON object (the decode worker answers it alone, with its own 400) or already names a room.
std::optional<nlohmann::json> ParsePdBody(std::string_view body);

// The two copies of a parsed body.
PdBodies SplitForPd(nlohmann::json body, std::string_view bootstrap_host, uint16_t bootstrap_port, uint64_t room);

// The generation routes a PD pair serves.
bool IsPdRoute(std::string_view path);

}  // namespace peregrine::router
