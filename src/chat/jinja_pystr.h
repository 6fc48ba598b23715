// Python-compatible text helpers shared by the Jinja interpreter and the DeepSeek-V4 encoder.
// Both must reproduce what CPython prints (repr of floats and strings, str.isspace, code-point
// indexing), because the reference renderers they are compared with are Python programs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::chat {

// repr(float): shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16, else exponent
// with at least two digits ("1e+16", "1.5e-07"); "inf", "-inf", "nan"; integral values end in ".0".
std::string PyFloatRepr(double value);

// repr(str) for valid UTF-8 text: single quotes unless the text holds ' and no ", backslash
// escapes for \\, \n, \r, \t, the chosen quote and other ASCII control characters (\xNN).
std::string PyStrRepr(std::string_view text);

// str.isspace() for one code point.
bool IsPySpace(uint32_t code_point);

// Decodes one code point at `pos`; advances `pos`. Invalid bytes decode as U+FFFD (one byte).
uint32_t DecodeUtf8(std::string_view text, size_t& pos);
void AppendUtf8(uint32_t code_point, std::string& out);

// Byte offsets of every code point start, plus text.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view text);
size_t CountCodePoints(std::string_view text);

// str.strip / lstrip / rstrip. With `chars` == nullptr strips Python whitespace; otherwise strips
// any code point contained in *chars.
std::string PyStrip(std::string_view text, const std::string* chars, bool left, bool right);

// ASCII-only case mapping (non-ASCII code points are kept as they are).
std::string AsciiLower(std::string_view text);
std::string AsciiUpper(std::string_view text);

}  // namespace peregrine::chat
