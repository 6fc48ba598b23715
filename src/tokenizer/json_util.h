// Typed, exception-free access to tokenizer.json fields (nlohmann_json throws on type
// mismatches; every read here checks the type first and reports the field path).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <string_view>

#include "base/status.h"

namespace peregrine::tokenizer {

using Json = nlohmann::json;

// The member `key` of object `j`, or nullptr when absent or null.
inline const Json* FindMember(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline Result<bool> GetBool(const Json& j, std::string_view key, std::string_view where,
                            bool fallback) {
  const Json* v = FindMember(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    return InvalidArgument(std::string(where) + "." + std::string(key) + " must be a boolean");
  }
  return v->get<bool>();
}

inline Result<std::string> GetString(const Json& j, std::string_view key,
                                     std::string_view where) {
  const Json* v = FindMember(j, key);
  if (v == nullptr || !v->is_string()) {
    return InvalidArgument(std::string(where) + "." + std::string(key) + " must be a string");
  }
  return v->get<std::string>();
}

// The only member of a one-member object (the {"Kind": value} shape tokenizer.json uses for
// tagged unions); `j` must be an object of size 1.
inline std::pair<std::string, const Json*> OnlyMember(const Json& j) {
  const auto it = j.begin();
  return {it.key(), &it.value()};
}

// The "type" tag of a component object.
inline Result<std::string> GetType(const Json& j, std::string_view where) {
  if (!j.is_object()) return InvalidArgument(std::string(where) + " must be an object");
  return GetString(j, "type", where);
}

}  // namespace peregrine::tokenizer
