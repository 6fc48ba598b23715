// Building and checking the JSON text of tool-call arguments.
//
// Arguments are emitted as JSON text, never re-serialised from a parsed value: JSON values the
// model wrote (string="false" parameters, JSON invoke bodies, V3.x argument objects) are kept
// byte for byte after trimming whitespace, so numbers keep their spelling and precision.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace peregrine::chat {

// True when `text` is exactly one JSON value (RFC 8259, UTF-8 checked), surrounding whitespace
// allowed.
bool IsJsonValue(std::string_view text);
// True when `text` is one JSON object, surrounding whitespace allowed.
bool IsJsonObject(std::string_view text);

// Assembles `{"k1": v1, "k2": v2}` from DSML parameters, in the order given.
class ArgumentsBuilder {
 public:
  // Adds a raw-text parameter (string="true"). False, and nothing added, when the key repeats or
  // key or value is not valid UTF-8.
  bool AddString(std::string_view key, std::string_view value);
  // Adds a JSON parameter (string="false"); `json` is trimmed. False, and nothing added, when the
  // key repeats, the key is not valid UTF-8 or `json` is not one JSON value.
  bool AddJson(std::string_view key, std::string_view json);
  std::string Build() const;
  void Clear();
  bool is_empty() const { return keys_.empty(); }

 private:
  bool AddMember(std::string_view key, std::string_view json_value);

  std::vector<std::string> keys_;
  std::string members_;  // `"k1": v1, "k2": v2`
};

}  // namespace peregrine::chat
