// ToolSpec and the optional check of parsed tool calls against the request's tools.
//
// The check is deliberately shallow (it is a guard against misparses, not a JSON Schema
// validator): the name must be one of the tools; the arguments must be a JSON object; every key
// in the schema's top-level "required" must be present; and each top-level property whose schema
// has "type" (a string or an array of strings) must match one of those types. Nested schemas,
// "enum", "$ref", "additionalProperties" and formats are not checked, and nothing is coerced.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace peregrine::chat {

struct ToolSpec {
  std::string name;
  nlohmann::json parameters;  // the function's JSON Schema; null or {} when absent
};

// Reads an OpenAI "tools" array ([{"type": "function", "function": {"name", "parameters"}}]).
// Fails with kInvalidArgument on a missing or non-string name or a non-object entry.
Result<std::vector<ToolSpec>> ToolSpecsFromOpenAi(const nlohmann::json& tools);

// Ok when a call named `name` with `arguments` (JSON text) passes the check above; otherwise
// kInvalidArgument saying why. Never throws.
Status ValidateToolCall(const std::vector<ToolSpec>& tools, std::string_view name,
                        std::string_view arguments);

}  // namespace peregrine::chat
