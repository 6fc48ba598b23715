// UTF-8 validation and lossy decoding with the replacement rule that Python's
// `bytes.decode("utf-8", errors="replace")` and Rust's `String::from_utf8_lossy` share:
// every maximal subpart of an ill-formed sequence becomes one U+FFFD (Unicode §3.9,
// "substitution of maximal subparts").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace peregrine::tokenizer {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

bool IsValidUtf8(std::string_view bytes);

// Appends `bytes` to `out` with ill-formed subparts replaced. When `is_final` is false, a
// trailing sequence that is incomplete but could still become valid is not consumed.
// Returns the number of bytes of `bytes` consumed (always all of them when `is_final`).
size_t AppendUtf8Lossy(std::string_view bytes, bool is_final, std::string& out);

// Decodes the code point that starts at `text[pos]`; `text` must be valid UTF-8.
// Advances `pos` past it.
inline char32_t DecodeUtf8(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + pos;
  if (p[0] < 0x80) {
    pos += 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    pos += 2;
    return (char32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  }
  if (p[0] < 0xF0) {
    pos += 3;
    return (char32_t{p[0] & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
  }
  pos += 4;
  return (char32_t{p[0] & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) |
         (char32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3Fu);
}

// Byte length of the code point whose lead byte is `lead` (valid UTF-8 assumed).
inline size_t Utf8SequenceLength(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

void AppendUtf8(char32_t cp, std::string& out);

// Unicode White_Space (what Rust's `char::is_whitespace` tests).
bool IsUnicodeWhiteSpace(char32_t cp);

// Byte offset just past the leading White_Space characters of `text` (valid UTF-8).
size_t LeadingWhiteSpaceEnd(std::string_view text);

// Byte offset where the trailing White_Space characters of `text` (valid UTF-8) begin.
size_t TrailingWhiteSpaceBegin(std::string_view text);

}  // namespace peregrine::tokenizer
