#include "chat/tool_call_parser_v3x.h"

#include "chat/marker_scan.h"
#include "chat/tool_call_parser_args.h"

namespace peregrine::chat {
namespace {

constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kFenceOpen = "```json";
constexpr std::string_view kFenceClose = "```";
constexpr std::string_view kCallType = "function";

ItemResult NeedMore() { return {}; }
ItemResult Malformed() { return {ItemStatus::kMalformed}; }

// Looks for `delimiter` after a name that starts at `start`. kMatch: found at *at. kPartial: not
// yet, keep waiting. kMismatch: the name can no longer fit in kMaxNameBytes.
PrefixMatch FindNameEnd(std::string_view text, size_t start, std::string_view delimiter,
                        size_t* search_from, size_t* at) {
  *at = FindResumable(text, delimiter, search_from);
  if (*at != std::string_view::npos) return PrefixMatch::kMatch;
  return text.size() - start > kMaxNameBytes + delimiter.size() ? PrefixMatch::kMismatch
                                                                : PrefixMatch::kPartial;
}

bool IsValidName(std::string_view raw, std::string_view name) {
  return !name.empty() && raw.size() <= kMaxNameBytes &&
         name.find_first_of("<>\n") == std::string_view::npos;
}

// Shared first step: an item is a call (moves `pos` past <｜tool▁call▁begin｜>) or the block's end.
ItemResult ParseV3ItemStart(std::string_view text, size_t* pos, bool* is_call) {
  *is_call = false;
  ItemStatus start = ClassifyItemStart(text, pos, kCallBegin, kV3CallsEnd);
  if (start == ItemStatus::kBlockEnd) return {ItemStatus::kBlockEnd, *pos + kV3CallsEnd.size()};
  if (start != ItemStatus::kCall) return {start};
  *pos += kCallBegin.size();
  *is_call = true;
  return NeedMore();
}

}  // namespace

void V31ItemParser::Reset() { *this = V31ItemParser(); }

ItemResult V31ItemParser::Parse(std::string_view text) {
  while (true) {
    switch (phase_) {
      case Phase::kItemStart: {
        bool is_call = false;
        ItemResult r = ParseV3ItemStart(text, &pos_, &is_call);
        if (!is_call) return r;
        search_from_ = pos_;
        phase_ = Phase::kName;
        break;
      }
      case Phase::kName: {
        size_t at = 0;
        PrefixMatch m = FindNameEnd(text, pos_, kSep, &search_from_, &at);
        if (m == PrefixMatch::kPartial) return NeedMore();
        if (m == PrefixMatch::kMismatch) return Malformed();
        std::string_view raw = text.substr(pos_, at - pos_);
        std::string_view name = TrimSpace(raw);
        if (!IsValidName(raw, name)) return Malformed();
        name_.assign(name);
        pos_ = at + kSep.size();
        search_from_ = pos_;
        phase_ = Phase::kArgs;
        break;
      }
      case Phase::kArgs: {
        size_t at = FindResumable(text, kCallEnd, &search_from_);
        if (at == std::string_view::npos) return NeedMore();
        std::string_view args = TrimSpace(text.substr(pos_, at - pos_));
        if (!IsJsonObject(args)) return Malformed();
        return {ItemStatus::kCall, at + kCallEnd.size(), name_, std::string(args)};
      }
    }
  }
}

void V3ItemParser::Reset() { *this = V3ItemParser(); }

ItemResult V3ItemParser::Parse(std::string_view text) {
  while (true) {
    switch (phase_) {
      case Phase::kItemStart: {
        bool is_call = false;
        ItemResult r = ParseV3ItemStart(text, &pos_, &is_call);
        if (!is_call) return r;
        search_from_ = pos_;
        phase_ = Phase::kType;
        break;
      }
      case Phase::kType: {
        size_t at = 0;
        PrefixMatch m = FindNameEnd(text, pos_, kSep, &search_from_, &at);
        if (m == PrefixMatch::kPartial) return NeedMore();
        if (m == PrefixMatch::kMismatch) return Malformed();
        if (TrimSpace(text.substr(pos_, at - pos_)) != kCallType) return Malformed();
        pos_ = at + kSep.size();
        search_from_ = pos_;
        phase_ = Phase::kName;
        break;
      }
      case Phase::kName: {
        size_t at = 0;
        PrefixMatch m = FindNameEnd(text, pos_, "\n", &search_from_, &at);
        if (m == PrefixMatch::kPartial) return NeedMore();
        if (m == PrefixMatch::kMismatch) return Malformed();
        std::string_view raw = text.substr(pos_, at - pos_);
        std::string_view name = TrimSpace(raw);
        if (!IsValidName(raw, name)) return Malformed();
        name_.assign(name);
        pos_ = at + 1;
        phase_ = Phase::kFence;
        break;
      }
      case Phase::kFence: {
        PrefixMatch m = MatchPrefix(text.substr(pos_), kFenceOpen);
        if (m == PrefixMatch::kPartial) return NeedMore();
        if (m == PrefixMatch::kMismatch) return Malformed();
        pos_ += kFenceOpen.size();
        search_from_ = pos_;
        phase_ = Phase::kArgs;
        break;
      }
      case Phase::kArgs: {
        size_t at = FindResumable(text, kCallEnd, &search_from_);
        if (at == std::string_view::npos) return NeedMore();
        std::string_view fenced = TrimSpace(text.substr(pos_, at - pos_));
        if (fenced.size() < kFenceClose.size() || !fenced.ends_with(kFenceClose)) {
          return Malformed();
        }
        std::string_view args = TrimSpace(fenced.substr(0, fenced.size() - kFenceClose.size()));
        if (!IsJsonObject(args)) return Malformed();
        return {ItemStatus::kCall, at + kCallEnd.size(), name_, std::string(args)};
      }
    }
  }
}

}  // namespace peregrine::chat
