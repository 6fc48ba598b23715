#include "router/routing_text.h"

#include <nlohmann/json.hpp>

namespace peregrine::router {

namespace {

void AppendPrompt(const nlohmann::json& p, std::string* out) {
  if (p.is_string()) {
    *out += p.get<std::string>();
  } else if (p.is_number_integer()) {
    *out += std::to_string(p.get<int64_t>());
    *out += ',';
  } else if (p.is_array()) {
    for (const nlohmann::json& e : p) AppendPrompt(e, out);
  }
}

void AppendContent(const nlohmann::json& c, std::string* out) {
  if (c.is_string()) {
    *out += c.get<std::string>();
  } else if (c.is_array()) {
    for (const nlohmann::json& part : c)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) *out += part["text"].get<std::string>();
  }
}

}  // namespace

std::string RoutingText(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::string(body);
  std::string text;
  if (auto it = j.find("messages"); it != j.end() && it->is_array()) {
    for (const nlohmann::json& m : *it) {
      if (!m.is_object()) continue;
      if (auto role = m.find("role"); role != m.end() && role->is_string()) text += role->get<std::string>();
      text += '\n';
      if (auto content = m.find("content"); content != m.end()) AppendContent(*content, &text);
      text += '\n';
    }
    return text;
  }
  if (auto it = j.find("prompt"); it != j.end()) {
    AppendPrompt(*it, &text);
    return text;
  }
  return std::string(body);
}

}  // namespace peregrine::router
