#include "chat/tool_call_parser_schema.h"

#include <cmath>
#include <exception>

namespace peregrine::chat {
namespace {

bool HasJsonType(const nlohmann::json& value, std::string_view type) {
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    double d = value.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
  }
  return true;  // unknown type names are not ours to reject
}

bool MatchesTypeSpec(const nlohmann::json& value, const nlohmann::json& type_spec) {
  if (type_spec.is_string()) return HasJsonType(value, type_spec.get<std::string>());
  if (!type_spec.is_array()) return true;
  for (const auto& t : type_spec) {
    if (!t.is_string() || HasJsonType(value, t.get<std::string>())) return true;
  }
  return false;
}

Status CheckAgainstSchema(const nlohmann::json& schema, const nlohmann::json& args,
                          std::string_view name) {
  if (!schema.is_object()) return Status::Ok();
  if (auto it = schema.find("required"); it != schema.end() && it->is_array()) {
    for (const auto& key : *it) {
      if (key.is_string() && !args.contains(key.get<std::string>())) {
        return InvalidArgument("tool " + std::string(name) + ": missing required argument " +
                               key.get<std::string>());
      }
    }
  }
  auto props = schema.find("properties");
  if (props == schema.end() || !props->is_object()) return Status::Ok();
  for (const auto& [key, value] : args.items()) {
    auto prop = props->find(key);
    if (prop == props->end() || !prop->is_object()) continue;
    auto type = prop->find("type");
    if (type != prop->end() && !MatchesTypeSpec(value, *type)) {
      return InvalidArgument("tool " + std::string(name) + ": argument " + key +
                             " has the wrong type");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ToolSpec>> ToolSpecsFromOpenAi(const nlohmann::json& tools) {
  if (!tools.is_array()) return InvalidArgument("tools must be an array");
  std::vector<ToolSpec> specs;
  for (const auto& tool : tools) {
    if (!tool.is_object()) return InvalidArgument("each tool must be an object");
    auto fn = tool.find("function");
    const nlohmann::json& function = fn != tool.end() ? *fn : tool;
    if (!function.is_object()) return InvalidArgument("tool function must be an object");
    auto name = function.find("name");
    if (name == function.end() || !name->is_string()) {
      return InvalidArgument("tool function needs a string name");
    }
    ToolSpec spec{name->get<std::string>(), nlohmann::json::object()};
    if (auto params = function.find("parameters"); params != function.end()) {
      spec.parameters = *params;
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

Status ValidateToolCall(const std::vector<ToolSpec>& tools, std::string_view name,
                        std::string_view arguments) {
  const ToolSpec* spec = nullptr;
  for (const auto& t : tools) {
    if (t.name == name) spec = &t;  // the last definition wins, as in the request
  }
  if (spec == nullptr) return InvalidArgument("unknown tool " + std::string(name));
  nlohmann::json args = nlohmann::json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) return InvalidArgument("tool arguments must be a JSON object");
  try {
    return CheckAgainstSchema(spec->parameters, args, name);
  } catch (const std::exception& e) {
    return Internal(std::string("schema check failed: ") + e.what());
  }
}

}  // namespace peregrine::chat
