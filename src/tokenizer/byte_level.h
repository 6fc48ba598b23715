// GPT-2's reversible byte <-> code point alphabet: printable bytes map to themselves, the
// other 68 bytes to U+0100..U+0143, so every byte string becomes printable text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace peregrine::tokenizer {

// The alphabet code point that stands for `byte`.
char32_t ByteLevelCodePoint(uint8_t byte);

// The byte that `cp` stands for, or -1 when `cp` is not in the alphabet.
int ByteLevelByte(char32_t cp);

// Maps every byte of `bytes` to its alphabet code point (UTF-8 encoded).
std::string BytesToByteLevel(std::string_view bytes);

// Inverse of BytesToByteLevel for valid UTF-8 `text`; nullopt when some code point is not
// in the alphabet (the ByteLevel decoder then keeps the token's own UTF-8 bytes).
std::optional<std::string> ByteLevelToBytes(std::string_view text);

}  // namespace peregrine::tokenizer
