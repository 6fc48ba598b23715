#include "tokenizer/utf8.h"

#include <cstring>

namespace peregrine::tokenizer {
namespace {

enum class SequenceKind { kValid, kIllFormed, kTruncated };

struct Sequence {
  SequenceKind kind;
  size_t length;  // bytes of the valid sequence, or of the maximal ill-formed subpart
};

// Classifies the sequence at p[0..n), n >= 1 (Unicode Table 3-7, well-formed byte sequences).
Sequence Classify(const uint8_t* p, size_t n) {
  const uint8_t lead = p[0];
  if (lead < 0x80) return {SequenceKind::kValid, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {SequenceKind::kIllFormed, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {SequenceKind::kTruncated, i};
    const uint8_t b = p[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {SequenceKind::kIllFormed, i};
  }
  return {SequenceKind::kValid, need};
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Sequence s = Classify(p + i, n - i);
    if (s.kind != SequenceKind::kValid) return false;
    i += s.length;
  }
  return true;
}

size_t AppendUtf8Lossy(std::string_view bytes, bool is_final, std::string& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one go
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Sequence s = Classify(p + i, n - i);
    if (s.kind == SequenceKind::kValid) {
      i += s.length;
      continue;
    }
    out.append(bytes.data() + run_start, i - run_start);
    if (s.kind == SequenceKind::kTruncated && !is_final) return i;
    out.append(kReplacementCharacter);
    i += s.length;
    run_start = i;
  }
  out.append(bytes.data() + run_start, n - run_start);
  return n;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsUnicodeWhiteSpace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t LeadingWhiteSpaceEnd(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsUnicodeWhiteSpace(DecodeUtf8(text, next))) break;
    pos = next;
  }
  return pos;
}

size_t TrailingWhiteSpaceBegin(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
    size_t pos = begin;
    if (!IsUnicodeWhiteSpace(DecodeUtf8(text, pos))) break;
    end = begin;
  }
  return end;
}

}  // namespace peregrine::tokenizer
