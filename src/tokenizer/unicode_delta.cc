#include "tokenizer/unicode_delta.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {

bool ContainsUnicodeDelta(std::string_view text) {
  const std::span<const UnicodeDeltaRange> ranges = UnicodeDeltaRanges();
  if (ranges.empty()) return false;
  const char32_t lowest = ranges.front().first;
  const bool skip_two_byte = lowest >= 0x800;
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    if (i + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (p[i] < 0xE0 && skip_two_byte) {  // below U+0800, under every newer character
      i += Utf8SequenceLength(p[i]);
      continue;
    }
    const char32_t cp = DecodeUtf8(text, i);
    if (cp < lowest) continue;
    const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                     [](char32_t c, const UnicodeDeltaRange& r) { return c < r.first; });
    if (it != ranges.begin() && cp <= std::prev(it)->last) return true;
  }
  return false;
}

}  // namespace peregrine::tokenizer
