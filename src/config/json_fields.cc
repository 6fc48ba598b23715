#include "config/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace peregrine {

const nlohmann::json* JsonFields::Find(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::Has(std::string_view key) const { return Find(key) != nullptr; }

std::string JsonFields::KeyName(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

Result<int64_t> JsonToInt(const nlohmann::json& value, const std::string& what) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(fmt::format("'{}' is out of range", what));
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9223372036854775808.0)
      return static_cast<int64_t>(d);
  }
  return InvalidArgument(fmt::format("'{}' must be an integer", what));
}

Result<std::optional<int64_t>> JsonFields::OptionalInt(std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  PG_ASSIGN_OR_RETURN(const int64_t i, JsonToInt(*v, KeyName(key)));
  return std::optional<int64_t>(i);
}

Result<std::optional<double>> JsonFields::OptionalDouble(std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return InvalidArgument(fmt::format("'{}' must be a number", KeyName(key)));
  const double d = v->get<double>();
  if (!std::isfinite(d)) return InvalidArgument(fmt::format("'{}' must be finite", KeyName(key)));
  return std::optional<double>(d);
}

Result<std::optional<std::string>> JsonFields::OptionalString(std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return InvalidArgument(fmt::format("'{}' must be a string", KeyName(key)));
  return std::optional<std::string>(v->get<std::string>());
}

Status JsonFields::ReadInt(std::string_view key, int64_t* value) const {
  PG_ASSIGN_OR_RETURN(const auto v, OptionalInt(key));
  if (v) *value = *v;
  return Status::Ok();
}

Status JsonFields::ReadDouble(std::string_view key, double* value) const {
  PG_ASSIGN_OR_RETURN(const auto v, OptionalDouble(key));
  if (v) *value = *v;
  return Status::Ok();
}

Status JsonFields::ReadBool(std::string_view key, bool* value) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean())
    return InvalidArgument(fmt::format("'{}' must be true or false", KeyName(key)));
  *value = v->get<bool>();
  return Status::Ok();
}

Status JsonFields::ReadString(std::string_view key, std::string* value) const {
  PG_ASSIGN_OR_RETURN(auto v, OptionalString(key));
  if (v) *value = std::move(*v);
  return Status::Ok();
}

}  // namespace peregrine
