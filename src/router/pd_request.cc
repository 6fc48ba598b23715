#include "router/pd_request.h"

namespace peregrine::router {

std::optional<nlohmann::json> ParsePdBody(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("bootstrap_room")) return std::nullopt;
  return j;
}

PdBodies SplitForPd(nlohmann::json j, std::string_view bootstrap_host, uint16_t bootstrap_port, uint64_t room) {
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

bool IsPdRoute(std::string_view path) { return path == "/v1/chat/completions" || path == "/v1/completions"; }

}  // namespace peregrine::router
