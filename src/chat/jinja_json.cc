#include "chat/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "chat/jinja_pystr.h"

namespace peregrine::chat {
namespace {

constexpr int kMaxJsonDepth = 512;

void AppendEscapedString(const std::string& text, bool ensure_ascii, std::string& out) {
  out += '"';
  size_t pos = 0;
  char buf[16];
  while (pos < text.size()) {
    auto byte = static_cast<unsigned char>(text[pos]);
    if (byte < 0x80) {
      ++pos;
      switch (byte) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (byte < 0x20 || (ensure_ascii && byte == 0x7f)) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", byte);
            out += buf;
          } else {
            out += static_cast<char>(byte);
          }
      }
      continue;
    }
    size_t start = pos;
    uint32_t cp = DecodeUtf8(text, pos);
    if (!ensure_ascii) {
      if (cp == 0xfffd && pos - start == 1) {
        AppendUtf8(cp, out);  // invalid byte: keep the output valid UTF-8
      } else {
        out.append(text, start, pos - start);
      }
      continue;
    }
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    out += buf;
  }
  out += '"';
}

struct Writer {
  const PyJsonOptions& options;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  void Newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(options.indent) * static_cast<size_t>(level), ' ');
  }

  Status Write(const nlohmann::ordered_json& v, int level) {
    if (level > kMaxJsonDepth) return InvalidArgument("JSON value nests too deeply");
    switch (v.type()) {
      case nlohmann::ordered_json::value_t::null: out += "null"; break;
      case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
      case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
      case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
      case nlohmann::ordered_json::value_t::number_float: {
        double d = v.get<double>();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += PyFloatRepr(d);
        break;
      }
      case nlohmann::ordered_json::value_t::string:
        AppendEscapedString(v.get_ref<const std::string&>(), options.ensure_ascii, out);
        break;
      case nlohmann::ordered_json::value_t::array: {
        if (v.empty()) {
          out += "[]";
          break;
        }
        out += '[';
        bool first = true;
        for (const auto& item : v) {
          if (!first) out += item_sep;
          first = false;
          if (options.indent >= 0) Newline(level + 1);
          PG_RETURN_IF_ERROR(Write(item, level + 1));
        }
        if (options.indent >= 0) Newline(level);
        out += ']';
        break;
      }
      case nlohmann::ordered_json::value_t::object: {
        if (v.empty()) {
          out += "{}";
          break;
        }
        std::vector<std::pair<const std::string*, const nlohmann::ordered_json*>> entries;
        for (auto it = v.begin(); it != v.end(); ++it) entries.emplace_back(&it.key(), &it.value());
        if (options.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return *a.first < *b.first; });
        out += '{';
        bool first = true;
        for (const auto& [key, item] : entries) {
          if (!first) out += item_sep;
          first = false;
          if (options.indent >= 0) Newline(level + 1);
          AppendEscapedString(*key, options.ensure_ascii, out);
          out += key_sep;
          PG_RETURN_IF_ERROR(Write(*item, level + 1));
        }
        if (options.indent >= 0) Newline(level);
        out += '}';
        break;
      }
      case nlohmann::ordered_json::value_t::binary:
      case nlohmann::ordered_json::value_t::discarded:
        return InvalidArgument("JSON value cannot be serialized");
    }
    return Status::Ok();
  }
};

}  // namespace

Result<std::string> PyJsonDumps(const nlohmann::ordered_json& value, const PyJsonOptions& options) {
  Writer writer{options, options.item_separator, options.key_separator, {}};
  if (!options.has_separators) {
    writer.item_sep = options.indent >= 0 ? "," : ", ";
    writer.key_sep = ": ";
  }
  PG_RETURN_IF_ERROR(writer.Write(value, 0));
  return std::move(writer.out);
}

}  // namespace peregrine::chat
