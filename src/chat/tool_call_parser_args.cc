#include "chat/tool_call_parser_args.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

#include "chat/marker_scan.h"

namespace peregrine::chat {
namespace {

// nlohmann reports invalid UTF-8 by throwing; the exception stops here.
std::optional<std::string> QuoteJsonString(std::string_view text) {
  try {
    return nlohmann::json(std::string(text)).dump();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

bool IsJsonValue(std::string_view text) {
  // nlohmann's lexer takes a NUL byte for the end of input ("3\0junk" would pass), and valid
  // JSON text never contains a raw NUL, so reject it up front.
  if (text.find('\0') != std::string_view::npos) return false;
  // accept() runs the SAX parser without building a value and does not throw on bad input.
  return nlohmann::json::accept(text);
}

bool IsJsonObject(std::string_view text) {
  std::string_view trimmed = TrimSpace(text);
  return !trimmed.empty() && trimmed.front() == '{' && IsJsonValue(trimmed);
}

bool ArgumentsBuilder::AddString(std::string_view key, std::string_view value) {
  std::optional<std::string> quoted = QuoteJsonString(value);
  return quoted && AddMember(key, *quoted);
}

bool ArgumentsBuilder::AddJson(std::string_view key, std::string_view json) {
  std::string_view trimmed = TrimSpace(json);
  return IsJsonValue(trimmed) && AddMember(key, trimmed);
}

bool ArgumentsBuilder::AddMember(std::string_view key, std::string_view json_value) {
  if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) return false;
  std::optional<std::string> quoted_key = QuoteJsonString(key);
  if (!quoted_key) return false;
  if (!keys_.empty()) members_ += ", ";
  members_ += *quoted_key;
  members_ += ": ";
  members_ += json_value;
  keys_.emplace_back(key);
  return true;
}

std::string ArgumentsBuilder::Build() const { return "{" + members_ + "}"; }

void ArgumentsBuilder::Clear() {
  keys_.clear();
  members_.clear();
}

}  // namespace peregrine::chat
