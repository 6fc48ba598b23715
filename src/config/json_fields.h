// JsonFields: typed, exception-free reads of one JSON object's keys. Every error names the
// key with its path ("rope_parameters.compress.factor"), so config errors point at the line
// to fix. Absent keys and explicit nulls leave the caller's default in place.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace peregrine {

class JsonFields {
 public:
  // `object` must outlive this reader; `path` prefixes key names in messages.
  JsonFields(const nlohmann::json& object, std::string path)
      : object_(object), path_(std::move(path)) {}

  // Present and not null.
  bool Has(std::string_view key) const;
  // Present, possibly null.
  bool Contains(std::string_view key) const { return object_.is_object() && object_.contains(key); }
  // The value at `key`, or null when absent.
  const nlohmann::json* Find(std::string_view key) const;
  // "path.key" for messages.
  std::string KeyName(std::string_view key) const;

  // Integers accept JSON integers and integral floats (4096.0) within int64 range.
  Status ReadInt(std::string_view key, int64_t* value) const;
  Status ReadDouble(std::string_view key, double* value) const;
  Status ReadBool(std::string_view key, bool* value) const;
  Status ReadString(std::string_view key, std::string* value) const;

  Result<std::optional<int64_t>> OptionalInt(std::string_view key) const;
  Result<std::optional<double>> OptionalDouble(std::string_view key) const;
  Result<std::optional<std::string>> OptionalString(std::string_view key) const;

 private:
  const nlohmann::json& object_;
  std::string path_;
};

// Converts one JSON value to int64; `what` names it in the message.
Result<int64_t> JsonToInt(const nlohmann::json& value, const std::string& what);

}  // namespace peregrine
