// Item parsers for the DeepSeek V3-family tool-call blocks, which share their special tokens:
//
//   V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{JSON}<｜tool▁call▁end｜>
//         ...<｜tool▁calls▁end｜>
//   V3/R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//          \n```json\n{JSON}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//
// Whitespace is allowed between calls and around NAME and the JSON. The arguments end at the first
// <｜tool▁call▁end｜> and must be one JSON object; in V3 the text before that token must end with
// the closing ``` fence (so ``` inside a JSON string is fine). NAME must be non-empty, at most
// kMaxNameBytes, and contain no '<', '>' or line break.
#pragma once

#include <string>
#include <string_view>

#include "chat/tool_call_parser_item.h"

namespace peregrine::chat {

inline constexpr std::string_view kV3CallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kV3CallsEnd = "<｜tool▁calls▁end｜>";

class V31ItemParser {
 public:
  void Reset();
  ItemResult Parse(std::string_view text);

 private:
  enum class Phase { kItemStart, kName, kArgs };
  Phase phase_ = Phase::kItemStart;
  size_t pos_ = 0;
  size_t search_from_ = 0;
  std::string name_;
};

class V3ItemParser {
 public:
  void Reset();
  ItemResult Parse(std::string_view text);

 private:
  enum class Phase { kItemStart, kType, kName, kFence, kArgs };
  Phase phase_ = Phase::kItemStart;
  size_t pos_ = 0;
  size_t search_from_ = 0;
  std::string name_;
};

}  // namespace peregrine::chat
