#include "chat/tool_call_parser.h"

#include <utility>

#include "base/check.h"
#include "chat/marker_scan.h"

namespace peregrine::chat {
namespace {

constexpr std::string_view kDsmlV4Opener = "<｜DSML｜tool_calls>";
constexpr std::string_view kDsmlV4Closer = "</｜DSML｜tool_calls>";
constexpr std::string_view kDsmlV32Opener = "<｜DSML｜function_calls>";
constexpr std::string_view kDsmlV32Closer = "</｜DSML｜function_calls>";
// DSML blocks follow a blank line ("\n\n"); it belongs to the block, not to the content.
constexpr size_t kDsmlSeparatorNewlines = 2;

}  // namespace

std::string_view ToolBlockOpener(ToolCallDialect dialect) {
  switch (dialect) {
    case ToolCallDialect::kDsmlV4:
      return kDsmlV4Opener;
    case ToolCallDialect::kDsmlV32:
      return kDsmlV32Opener;
    case ToolCallDialect::kV31:
    case ToolCallDialect::kV3:
      return kV3CallsBegin;
  }
  return {};
}

namespace {

std::string_view ToolBlockCloser(ToolCallDialect dialect) {
  switch (dialect) {
    case ToolCallDialect::kDsmlV4:
      return kDsmlV4Closer;
    case ToolCallDialect::kDsmlV32:
      return kDsmlV32Closer;
    case ToolCallDialect::kV31:
    case ToolCallDialect::kV3:
      return kV3CallsEnd;
  }
  return {};
}

}  // namespace

ToolCallParser::ToolCallParser(ToolCallParserOptions options)
    : options_(std::move(options)),
      opener_(ToolBlockOpener(options_.dialect)),
      closer_(ToolBlockCloser(options_.dialect)),
      max_separator_newlines_(0),
      item_(V3ItemParser()) {
  switch (options_.dialect) {
    case ToolCallDialect::kDsmlV4:
    case ToolCallDialect::kDsmlV32:
      max_separator_newlines_ = kDsmlSeparatorNewlines;
      item_ = DsmlItemParser(closer_);
      break;
    case ToolCallDialect::kV31:
      item_ = V31ItemParser();
      break;
    case ToolCallDialect::kV3:
      break;
  }
}

ToolCallParserDelta ToolCallParser::Feed(std::string_view piece) {
  PG_CHECK(state_ != State::kFinished, "ToolCallParser::Feed after Finish");
  ToolCallParserDelta out;
  pending_.append(piece);
  Run(&out);
  return out;
}

ToolCallParserDelta ToolCallParser::Finish() {
  PG_CHECK(state_ != State::kFinished, "ToolCallParser::Finish called twice");
  ToolCallParserDelta out;
  Run(&out);
  if (state_ == State::kBlock) FinishBlock(&out);
  // Whatever is still held back can no longer become markup.
  out.content += pending_;
  pending_.clear();
  state_ = State::kFinished;
  return out;
}

void ToolCallParser::Run(ToolCallParserDelta* out) {
  bool go_on = true;
  while (go_on) {
    switch (state_) {
      case State::kContent:
        go_on = ScanContent(out);
        break;
      case State::kBlock:
        go_on = ParseBlock(out);
        break;
      case State::kFallback:
        go_on = ScanFallback(out);
        break;
      case State::kFinished:
        go_on = false;
        break;
    }
  }
}

bool ToolCallParser::ScanContent(ToolCallParserDelta* out) {
  size_t at = pending_.find(opener_);
  if (at != std::string::npos) {
    size_t block_start = BackOverNewlines(pending_, at, max_separator_newlines_);
    out->content.append(pending_, 0, block_start);
    pending_.erase(0, block_start);
    item_start_ = at - block_start + opener_.size();
    num_block_calls_ = 0;
    std::visit([](auto& p) { p.Reset(); }, item_);
    state_ = State::kBlock;
    return true;
  }
  size_t hold = pending_.size() - PartialMarkerSuffix(pending_, opener_);
  hold = BackOverNewlines(pending_, hold, max_separator_newlines_);
  out->content.append(pending_, 0, hold);
  pending_.erase(0, hold);
  return false;
}

bool ToolCallParser::ParseBlock(ToolCallParserDelta* out) {
  std::string_view rest = std::string_view(pending_).substr(item_start_);
  ItemResult item = std::visit([rest](auto& p) { return p.Parse(rest); }, item_);
  switch (item.status) {
    case ItemStatus::kNeedMore:
      return false;
    case ItemStatus::kCall:
      if (options_.validate_against_tools &&
          !ValidateToolCall(options_.tools, item.name, item.arguments).ok()) {
        break;  // falls back below
      }
      pending_.erase(0, item_start_ + item.consumed);
      item_start_ = 0;
      std::visit([](auto& p) { p.Reset(); }, item_);
      EmitCall(std::move(item.name), std::move(item.arguments), out);
      ++num_block_calls_;
      return true;
    case ItemStatus::kBlockEnd:
      if (num_block_calls_ == 0) break;  // an empty block is not a tool call: falls back
      pending_.erase(0, item_start_ + item.consumed);
      state_ = State::kContent;
      return true;
    case ItemStatus::kMalformed:
      break;
  }
  // Fallback: pending_ starts where the failed item (or the whole block) starts.
  state_ = State::kFallback;
  return true;
}

bool ToolCallParser::ScanFallback(ToolCallParserDelta* out) {
  size_t at = pending_.find(closer_);
  if (at != std::string::npos) {
    size_t end = at + closer_.size();
    out->content.append(pending_, 0, end);
    pending_.erase(0, end);
    state_ = State::kContent;
    return true;
  }
  size_t hold = pending_.size() - PartialMarkerSuffix(pending_, closer_);
  out->content.append(pending_, 0, hold);
  pending_.erase(0, hold);
  return false;
}

void ToolCallParser::FinishBlock(ToolCallParserDelta* out) {
  // An unterminated block: complete calls stand, and what follows them is dropped when it is only
  // whitespace and the start of the closing marker (output cut inside it); anything else is raw
  // text again.
  if (num_block_calls_ > 0 && MatchPrefix(TrimSpace(pending_), closer_) == PrefixMatch::kPartial) {
    pending_.clear();
  } else {
    out->content += pending_;
    pending_.clear();
  }
  state_ = State::kContent;
}

void ToolCallParser::EmitCall(std::string name, std::string arguments, ToolCallParserDelta* out) {
  int index = num_calls_++;
  out->tool_calls.push_back({index, options_.ids.Next(), std::move(name), ""});
  out->tool_calls.push_back({index, "", "", std::move(arguments)});
}

ParsedToolCalls ParseToolCalls(std::string_view text, ToolCallParserOptions options) {
  ToolCallParser parser(std::move(options));
  ToolCallParserDelta first = parser.Feed(text);
  ToolCallParserDelta last = parser.Finish();
  ParsedToolCalls parsed;
  parsed.content = first.content + last.content;
  AppendToolCallDeltas(first.tool_calls, &parsed.tool_calls);
  AppendToolCallDeltas(last.tool_calls, &parsed.tool_calls);
  return parsed;
}

void AppendToolCallDeltas(const std::vector<ToolCallDelta>& deltas, std::vector<ToolCall>* calls) {
  for (const auto& d : deltas) {
    if (static_cast<size_t>(d.index) == calls->size()) {
      calls->push_back({d.id, d.name, d.arguments});
      continue;
    }
    PG_CHECK(d.index >= 0 && static_cast<size_t>(d.index) < calls->size(),
             "tool call delta for an index that was never opened");
    (*calls)[static_cast<size_t>(d.index)].arguments += d.arguments;
  }
}

}  // namespace peregrine::chat
