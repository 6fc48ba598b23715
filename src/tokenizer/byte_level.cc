#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

constexpr bool IsPrintableByte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> code_point{};
  std::array<int16_t, 0x144> byte{};  // indexed by code point < 0x144
};

constexpr Tables MakeTables() {
  Tables t;
  for (auto& b : t.byte) b = -1;
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = IsPrintableByte(b) ? static_cast<char32_t>(b) : next++;
    t.code_point[b] = cp;
    t.byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

constexpr Tables kTables = MakeTables();

}  // namespace

char32_t ByteLevelCodePoint(uint8_t byte) { return kTables.code_point[byte]; }

int ByteLevelByte(char32_t cp) { return cp < kTables.byte.size() ? kTables.byte[cp] : -1; }

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) AppendUtf8(ByteLevelCodePoint(static_cast<uint8_t>(c)), out);
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const int b = ByteLevelByte(DecodeUtf8(text, pos));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace peregrine::tokenizer
