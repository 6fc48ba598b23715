#include "router/pd_request.h"

#include <nlohmann/json.hpp>

namespace peregrine::router {

std::optional<PdBodies> SplitForPd(std::string_view body, std::string_view bootstrap_host, uint16_t bootstrap_port,
                                   uint64_t room) {
  // nlohmann::json, not ordered_json: its members are a map, so a hostile body of many keys
  // costs O(n log n), not O(n^2) (the workers do not care about key order).
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("bootstrap_room")) return std::nullopt;
  j["bootstrap_host"] = bootstrap_host;
  j["bootstrap_port"] = bootstrap_port;
  j["bootstrap_room"] = room;
  PdBodies out;
  out.decode = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  j["stream"] = false;
  j.erase("stream_options");
  out.prefill = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return out;
}

bool CanSplitForPd(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  return !j.is_discarded() && j.is_object() && !j.contains("bootstrap_room");
}

bool IsPdRoute(std::string_view path) { return path == "/v1/chat/completions" || path == "/v1/completions"; }

}  // namespace peregrine::router
