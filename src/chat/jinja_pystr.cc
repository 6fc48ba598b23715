#include "chat/jinja_pystr.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace peregrine::chat {

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits in scientific form: "-d.ddde+XX".
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  if (ec != std::errc()) return "nan";
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  bool negative = false;
  if (!sci.empty() && sci[0] == '-') {
    negative = true;
    sci.remove_prefix(1);
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits.push_back(c);
  int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();

  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
    return out;
  }
  int decimal_point = exponent + 1;  // digits before the point
  if (decimal_point <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decimal_point), '0');
    out += digits;
  } else if (static_cast<size_t>(decimal_point) >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(decimal_point) - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decimal_point));
    out += '.';
    out += digits.substr(static_cast<size_t>(decimal_point));
  }
  return out;
}

std::string PyStrRepr(std::string_view text) {
  bool has_single = text.find('\'') != std::string_view::npos;
  bool has_double = text.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

bool IsPySpace(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
  if (cp < 0x80) return false;
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

uint32_t DecodeUtf8(std::string_view text, size_t& pos) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  int length = 0;
  uint32_t cp = 0;
  uint32_t min_cp = 0;
  if ((b0 & 0xe0) == 0xc0) {
    length = 2, cp = b0 & 0x1fu, min_cp = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    length = 3, cp = b0 & 0x0fu, min_cp = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    length = 4, cp = b0 & 0x07u, min_cp = 0x10000;
  } else {
    ++pos;
    return 0xfffd;
  }
  if (pos + static_cast<size_t>(length) > text.size()) {
    ++pos;
    return 0xfffd;
  }
  for (int i = 1; i < length; ++i) {
    unsigned char b = byte(pos + static_cast<size_t>(i));
    if ((b & 0xc0) != 0x80) {
      ++pos;
      return 0xfffd;
    }
    cp = (cp << 6) | (b & 0x3fu);
  }
  if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
    ++pos;
    return 0xfffd;
  }
  pos += static_cast<size_t>(length);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::vector<size_t> CodePointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  size_t pos = 0;
  while (pos < text.size()) {
    offsets.push_back(pos);
    DecodeUtf8(text, pos);
  }
  offsets.push_back(text.size());
  return offsets;
}

size_t CountCodePoints(std::string_view text) {
  size_t count = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    DecodeUtf8(text, pos);
    ++count;
  }
  return count;
}

std::string PyStrip(std::string_view text, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> strip_set;
  if (chars != nullptr) {
    size_t p = 0;
    while (p < chars->size()) strip_set.push_back(DecodeUtf8(*chars, p));
  }
  auto strippable = [&](uint32_t cp) {
    if (chars == nullptr) return IsPySpace(cp);
    for (uint32_t s : strip_set)
      if (s == cp) return true;
    return false;
  };
  std::vector<size_t> offsets = CodePointOffsets(text);
  size_t n = offsets.size() - 1;
  size_t begin = 0;
  size_t end = n;
  auto at = [&](size_t i) {
    size_t p = offsets[i];
    return DecodeUtf8(text, p);
  };
  if (left)
    while (begin < end && strippable(at(begin))) ++begin;
  if (right)
    while (end > begin && strippable(at(end - 1))) --end;
  return std::string(text.substr(offsets[begin], offsets[end] - offsets[begin]));
}

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string AsciiUpper(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

}  // namespace peregrine::chat
