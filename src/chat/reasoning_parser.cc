#include "chat/reasoning_parser.h"

#include <utility>

#include "base/check.h"

namespace peregrine::chat {
namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
// The blank line the DSML format puts before a tool-call block.
constexpr size_t kMaxSeparatorNewlines = 2;

}  // namespace

ReasoningParser::ReasoningParser(ReasoningParserOptions options)
    : options_(std::move(options)),
      state_(options_.starts_in_reasoning ? State::kStart : State::kContent) {}

ReasoningDelta ReasoningParser::Feed(std::string_view piece) {
  PG_CHECK(state_ != State::kFinished, "ReasoningParser::Feed after Finish");
  ReasoningDelta out;
  if (state_ == State::kContent) {
    out.content.assign(piece);
    return out;
  }
  pending_.append(piece);
  Run(&out);
  return out;
}

ReasoningDelta ReasoningParser::Finish() {
  PG_CHECK(state_ != State::kFinished, "ReasoningParser::Finish called twice");
  ReasoningDelta out;
  // Held-back bytes never became a marker: they are reasoning (or content, after the end).
  if (state_ == State::kContent) {
    out.content = std::move(pending_);
  } else {
    out.reasoning_content = std::move(pending_);
  }
  pending_.clear();
  state_ = State::kFinished;
  return out;
}

void ReasoningParser::Run(ReasoningDelta* out) {
  if (state_ == State::kStart) {
    switch (MatchPrefix(pending_, kThinkStart)) {
      case PrefixMatch::kPartial:
        return;
      case PrefixMatch::kMatch:
        pending_.erase(0, kThinkStart.size());
        break;
      case PrefixMatch::kMismatch:
        break;
    }
    state_ = State::kReasoning;
  }
  if (state_ == State::kReasoning) ScanReasoning(out);
}

PrefixMatch ReasoningParser::MatchToolStart(std::string_view rest) const {
  PrefixMatch opener = MatchPrefix(rest, options_.tool_block_opener);
  if (opener != PrefixMatch::kMatch) return opener;
  size_t after = SkipSpace(rest, options_.tool_block_opener.size());
  return MatchPrefix(rest.substr(after), options_.tool_invoke_opener);
}

void ReasoningParser::ScanReasoning(ReasoningDelta* out) {
  const bool has_tool_end = !options_.tool_block_opener.empty();
  std::string_view text = pending_;
  size_t i = scan_pos_;
  while (i < text.size()) {
    std::string_view rest = text.substr(i);
    PrefixMatch think = MatchPrefix(rest, kThinkEnd);
    if (think == PrefixMatch::kMatch) {
      out->reasoning_content.append(text.substr(0, i));
      out->content.append(rest.substr(kThinkEnd.size()));
      pending_.clear();
      state_ = State::kContent;
      return;
    }
    if (think == PrefixMatch::kPartial) break;
    if (has_tool_end) {
      LiteralMask next = mask_;
      next.Advance(text[i]);
      if (text[i] == options_.tool_block_opener[0] && !next.is_masked()) {
        PrefixMatch tool = MatchToolStart(rest);
        if (tool == PrefixMatch::kMatch) {
          size_t cut = BackOverNewlines(text, i, kMaxSeparatorNewlines);
          out->reasoning_content.append(text.substr(0, cut));
          out->content.append(text.substr(cut));
          pending_.clear();
          state_ = State::kContent;
          return;
        }
        if (tool == PrefixMatch::kPartial) break;
      }
      mask_ = next;
    }
    ++i;
  }
  scan_pos_ = i;
  // Hold back from the first possible marker start, plus the separator newlines before it.
  size_t hold = has_tool_end ? BackOverNewlines(text, i, kMaxSeparatorNewlines) : i;
  out->reasoning_content.append(text.substr(0, hold));
  pending_.erase(0, hold);
  scan_pos_ -= hold;
}

ReasoningDelta SplitReasoning(std::string_view text, const ReasoningParserOptions& options) {
  ReasoningParser parser(options);
  ReasoningDelta out = parser.Feed(text);
  ReasoningDelta tail = parser.Finish();
  out.reasoning_content += tail.reasoning_content;
  out.content += tail.content;
  return out;
}

}  // namespace peregrine::chat
