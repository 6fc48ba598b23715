// ToolCallParser: finds tool-call blocks in (non-reasoning) model output, incrementally, and
// turns them into OpenAI-shaped tool calls and streaming deltas.
//
// Contract (identical for every split of the input; see README "## Parsers"):
//  - Text outside tool-call blocks is content. Only a suffix that may still become a block
//    opener (and, for DSML, up to two '\n' before it: the blank-line separator) is held back.
//  - A call is emitted once it is complete and well formed: first a delta with index, id and
//    name (arguments ""), then one delta with the whole arguments text. Nothing is emitted for a
//    call that may still fail, so a failure can never contradict what was sent.
//  - Fallback: when an item of a block is malformed (or rejected by the optional tool check),
//    the block's unconsumed raw text (from the separator when no call of the block was emitted,
//    else from the end of the last emitted call) up to and including the block's closing marker
//    (or the end of the stream) becomes content, verbatim. A block with no call, or one still
//    open at the end of the stream, falls back the same way; only whitespace (and a truncated
//    closing marker) left after emitted calls of an unclosed block is dropped.
//  - Hence when no call is emitted, content is exactly the input.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "chat/tool_call_id_generator.h"
#include "chat/tool_call_parser_dsml.h"
#include "chat/tool_call_parser_schema.h"
#include "chat/tool_call_parser_v3x.h"

namespace peregrine::chat {

enum class ToolCallDialect {
  kDsmlV4,   // <｜DSML｜tool_calls> (DeepSeek-V4)
  kDsmlV32,  // <｜DSML｜function_calls> (DeepSeek-V3.2)
  kV31,      // V3.1: NAME<｜tool▁sep｜>{json} inside <｜tool▁calls▁begin｜>
  kV3,       // V3 and R1: function<｜tool▁sep｜>NAME, then a ```json fence
};

// Opening marker of a block in `dialect` (what ends reasoning early for DSML dialects).
std::string_view ToolBlockOpener(ToolCallDialect dialect);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // one JSON object, as text
  bool operator==(const ToolCall&) const = default;
};

// One element of an OpenAI streaming `delta.tool_calls`. The first delta of a call carries id
// and name (type "function" is implied) with empty arguments; later ones carry only arguments.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const ToolCallDelta&) const = default;
};

struct ToolCallParserDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
};

struct ToolCallParserOptions {
  ToolCallDialect dialect = ToolCallDialect::kDsmlV4;
  ToolCallIdGenerator ids;
  // When set, a call whose name is not in `tools` or whose arguments fail ValidateToolCall is
  // treated as malformed (its text falls back to content).
  bool validate_against_tools = false;
  std::vector<ToolSpec> tools;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallParserOptions options);

  // Consumes the next piece of output (any byte split). Never fails.
  ToolCallParserDelta Feed(std::string_view piece);
  // Ends the stream: releases held-back text and falls back an unterminated block. Feed must not
  // be called afterwards.
  ToolCallParserDelta Finish();

 private:
  enum class State {
    kContent,   // scanning for a block opener
    kBlock,     // inside a block, parsing items
    kFallback,  // a malformed block: raw text is content up to the block's closing marker
    kFinished,
  };
  using ItemParser = std::variant<DsmlItemParser, V31ItemParser, V3ItemParser>;

  void Run(ToolCallParserDelta* out);
  // Each returns true when the state changed and Run should go on.
  bool ScanContent(ToolCallParserDelta* out);
  bool ParseBlock(ToolCallParserDelta* out);
  bool ScanFallback(ToolCallParserDelta* out);
  void EmitCall(std::string name, std::string arguments, ToolCallParserDelta* out);
  void FinishBlock(ToolCallParserDelta* out);

  ToolCallParserOptions options_;
  std::string opener_;
  std::string closer_;
  size_t max_separator_newlines_;
  ItemParser item_;
  State state_ = State::kContent;
  std::string pending_;      // held-back content, or the unconsumed raw text of the block
  size_t item_start_ = 0;    // kBlock: where the current item begins in pending_
  int num_block_calls_ = 0;  // calls emitted from the current block
  int num_calls_ = 0;        // calls emitted so far (the next call's index)
};

// The whole-text form: content and the assembled calls, exactly as any split of `text` fed to a
// ToolCallParser built from `options` (followed by Finish) yields.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ParsedToolCalls&) const = default;
};
ParsedToolCalls ParseToolCalls(std::string_view text, ToolCallParserOptions options);

// Folds `deltas` into `calls` (appending a call on its first delta, extending arguments after).
void AppendToolCallDeltas(const std::vector<ToolCallDelta>& deltas, std::vector<ToolCall>* calls);

}  // namespace peregrine::chat
