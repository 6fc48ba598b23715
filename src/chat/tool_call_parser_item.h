// The step shared by the tool-call grammars: parse one item (a call, or the end of the block)
// from the unconsumed text of a tool-call block.
//
// Item parsers are resumable: between Reset() calls they are handed the same text, only ever
// extended at the end, and keep their progress so the total work stays linear. Their answer
// depends only on the bytes given, and once it is not kNeedMore it no longer changes as text is
// appended; this is what makes every split of a stream parse the same.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace peregrine::chat {

enum class ItemStatus {
  kNeedMore,   // the text so far can still become a valid item
  kCall,       // a complete, well-formed call: name and arguments are set
  kBlockEnd,   // the block's closing marker
  kMalformed,  // no continuation can make this a valid item
};

// Names (tool, parameter) longer than this are treated as malformed, which bounds how long a
// parser waits for a closing quote or separator that never comes.
inline constexpr size_t kMaxNameBytes = 512;

struct ItemResult {
  ItemStatus status = ItemStatus::kNeedMore;
  size_t consumed = 0;    // kCall, kBlockEnd: bytes of text the item spans
  std::string name;       // kCall
  std::string arguments;  // kCall: one JSON object, as text
};

// Classifies what begins at the first non-whitespace byte at or after `*pos`: the start of a
// call (`call_opener`), the block's end (`block_closer`), too little text to tell, or neither.
// On return `*pos` is at that byte (the end of text when there is none), so whitespace is
// skipped once, not on every call.
ItemStatus ClassifyItemStart(std::string_view text, size_t* pos, std::string_view call_opener,
                             std::string_view block_closer);

}  // namespace peregrine::chat
