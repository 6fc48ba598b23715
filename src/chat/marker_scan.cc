#include "chat/marker_scan.h"

#include <algorithm>

namespace peregrine::chat {

PrefixMatch MatchPrefix(std::string_view text, std::string_view literal) {
  if (text.size() >= literal.size()) {
    return text.substr(0, literal.size()) == literal ? PrefixMatch::kMatch : PrefixMatch::kMismatch;
  }
  return literal.substr(0, text.size()) == text ? PrefixMatch::kPartial : PrefixMatch::kMismatch;
}

size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

size_t FindResumable(std::string_view text, std::string_view marker, size_t* resume) {
  size_t at = text.find(marker, *resume);
  if (at != std::string_view::npos) return at;
  // Only the last marker.size() - 1 bytes can begin an occurrence that more text completes.
  size_t keep = marker.empty() ? 0 : marker.size() - 1;
  if (text.size() > keep) *resume = std::max(*resume, text.size() - keep);
  return std::string_view::npos;
}

size_t SkipSpace(std::string_view text, size_t pos) {
  while (pos < text.size() && IsSpace(text[pos])) ++pos;
  return pos;
}

std::string_view TrimSpace(std::string_view text) {
  size_t begin = SkipSpace(text, 0);
  size_t end = text.size();
  while (end > begin && IsSpace(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

size_t BackOverNewlines(std::string_view text, size_t end, size_t max_newlines) {
  size_t start = end;
  while (start > 0 && end - start < max_newlines && text[start - 1] == '\n') --start;
  return start;
}

}  // namespace peregrine::chat
