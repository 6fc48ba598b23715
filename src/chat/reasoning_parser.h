// ReasoningParser: splits model output into reasoning_content and content, incrementally.
//
// Contract (identical for streaming and whole text; see README "## Parsers"):
//  - With starts_in_reasoning (thinking mode) the output begins inside the reasoning; a literal
//    "<think>" at the very start is dropped. Everything before the first "</think>" is
//    reasoning; "</think>" itself is dropped; everything after it is content. Without
//    starts_in_reasoning everything is content.
//  - When tool_block_opener is set, an alternate end of reasoning is the opener followed by
//    optional whitespace and invoke_opener ("<｜DSML｜tool_calls>\n<｜DSML｜invoke"), provided the
//    opener is not inside a Markdown code literal (see LiteralMask). The up to two '\n' just
//    before the opener and the opener itself go to content, where the tool-call parser reads
//    them. "</think>" always ends reasoning, quoted or not: it is one special token.
//  - Only bytes that may still become one of those markers (and, with a tool opener, up to two
//    trailing '\n') are held back; everything else is returned by the Feed that brought it.
#pragma once

#include <string>
#include <string_view>

#include "chat/marker_scan.h"
#include "chat/reasoning_literal_mask.h"

namespace peregrine::chat {

struct ReasoningParserOptions {
  bool starts_in_reasoning = false;
  // Tool-call block opener that may end reasoning without "</think>" (empty: none).
  std::string tool_block_opener;
  // What must follow tool_block_opener (after whitespace) for it to count.
  std::string tool_invoke_opener;
};

struct ReasoningDelta {
  std::string reasoning_content;
  std::string content;
  bool operator==(const ReasoningDelta&) const = default;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningParserOptions options);

  // Consumes the next piece of output text (any byte split, including inside UTF-8 sequences)
  // and returns what can be decided now. Never fails: every byte ends up in one of the fields.
  ReasoningDelta Feed(std::string_view piece);
  // Ends the stream and releases anything held back. Feed must not be called afterwards.
  ReasoningDelta Finish();

  bool is_in_reasoning() const { return state_ != State::kContent; }

 private:
  enum class State { kStart, kReasoning, kContent, kFinished };

  void Run(ReasoningDelta* out);
  void ScanReasoning(ReasoningDelta* out);
  // How text starting at a candidate position relates to the tool-block end marker.
  PrefixMatch MatchToolStart(std::string_view rest) const;

  ReasoningParserOptions options_;
  State state_;
  std::string pending_;  // bytes not yet returned
  size_t scan_pos_ = 0;  // bytes of pending_ already known not to start a marker
  LiteralMask mask_;     // literal state before pending_[scan_pos_]
};

// The whole-text form: exactly what feeding `text` in any split and then Finish() returns.
ReasoningDelta SplitReasoning(std::string_view text, const ReasoningParserOptions& options);

}  // namespace peregrine::chat
