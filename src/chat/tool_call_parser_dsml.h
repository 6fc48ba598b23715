// DsmlItemParser: one item of a DeepSeek DSML tool-call block (V4 `tool_calls`, V3.2
// `function_calls`; the inner syntax is the same).
//
//   <｜DSML｜invoke name="NAME">
//   <｜DSML｜parameter name="P" string="true">raw text</｜DSML｜parameter>
//   <｜DSML｜parameter name="Q" string="false">JSON value</｜DSML｜parameter>
//   </｜DSML｜invoke>
//
// or, instead of parameters, one JSON object as the invoke body. Whitespace is allowed between
// tags and around attributes; attributes must come in this order. A string="true" value is kept
// exactly (not trimmed); a string="false" value must be one JSON value. A value ends at the first
// closing parameter tag, and a JSON body at the first closing invoke tag. An invoke with no
// parameters has arguments "{}". Repeated parameter names, an unknown string flag, text between
// tags, invalid JSON or invalid UTF-8 make the item malformed.
#pragma once

#include <string>
#include <string_view>

#include "chat/tool_call_parser_args.h"
#include "chat/tool_call_parser_item.h"

namespace peregrine::chat {

class DsmlItemParser {
 public:
  // `block_closer`: "</｜DSML｜tool_calls>" or "</｜DSML｜function_calls>".
  explicit DsmlItemParser(std::string block_closer);

  void Reset();
  ItemResult Parse(std::string_view text);

 private:
  enum class Phase {
    kItemStart,  // before an invoke or the block's end
    kBody,       // inside an invoke, before a parameter, a JSON body or the closing tag
    kValue,      // inside a parameter value
    kJsonBody,   // inside a JSON-object body
  };

  ItemResult ParseItemStart(std::string_view text);
  ItemResult ParseBody(std::string_view text);

  std::string block_closer_;
  Phase phase_ = Phase::kItemStart;
  size_t pos_ = 0;          // start of the construct being parsed
  size_t search_from_ = 0;  // resume point for the closing-tag search of the open value
  std::string name_;
  std::string param_name_;
  bool is_string_param_ = false;
  ArgumentsBuilder args_;
};

}  // namespace peregrine::chat
