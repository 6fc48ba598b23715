#include "chat/tool_call_parser_item.h"

#include "chat/marker_scan.h"

namespace peregrine::chat {

ItemStatus ClassifyItemStart(std::string_view text, size_t* pos, std::string_view call_opener,
                             std::string_view block_closer) {
  size_t start = SkipSpace(text, *pos);
  *pos = start;
  if (start == text.size()) return ItemStatus::kNeedMore;
  std::string_view rest = text.substr(start);
  PrefixMatch call = MatchPrefix(rest, call_opener);
  PrefixMatch end = MatchPrefix(rest, block_closer);
  if (call == PrefixMatch::kMatch || end == PrefixMatch::kMatch) {
    return call == PrefixMatch::kMatch ? ItemStatus::kCall : ItemStatus::kBlockEnd;
  }
  if (call == PrefixMatch::kPartial || end == PrefixMatch::kPartial) return ItemStatus::kNeedMore;
  return ItemStatus::kMalformed;
}

}  // namespace peregrine::chat
