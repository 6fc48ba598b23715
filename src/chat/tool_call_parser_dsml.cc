#include "chat/tool_call_parser_dsml.h"

#include <utility>

#include "chat/marker_scan.h"

namespace peregrine::chat {
namespace {

constexpr std::string_view kInvokeOpener = "<｜DSML｜invoke";
constexpr std::string_view kInvokeCloser = "</｜DSML｜invoke>";
constexpr std::string_view kParamOpener = "<｜DSML｜parameter";
constexpr std::string_view kParamCloser = "</｜DSML｜parameter>";

ItemResult NeedMore() { return {}; }
ItemResult Malformed() { return {ItemStatus::kMalformed}; }

// Reads a tag's pieces from a growing buffer, telling "cannot match" from "not enough text".
class TagReader {
 public:
  TagReader(std::string_view text, size_t pos) : text_(text), pos_(pos) {}

  bool Literal(std::string_view literal) {
    if (!ok()) return false;
    status_ = MatchPrefix(text_.substr(pos_), literal);
    if (status_ != PrefixMatch::kMatch) return false;
    pos_ += literal.size();
    return true;
  }
  bool Spaces(bool required) {
    if (!ok()) return false;
    size_t end = SkipSpace(text_, pos_);
    if (end == text_.size()) {
      status_ = PrefixMatch::kPartial;
    } else if (required && end == pos_) {
      status_ = PrefixMatch::kMismatch;
    }
    pos_ = end;
    return ok();
  }
  // `key="value"`: a non-empty value of at most kMaxNameBytes without '"', '<', '>' or '\n'.
  bool Attribute(std::string_view key, std::string* value) {
    if (!Literal(key) || !Literal("=\"")) return false;
    for (size_t i = pos_;; ++i) {
      if (i == text_.size()) {
        status_ = PrefixMatch::kPartial;
        return false;
      }
      if (i - pos_ > kMaxNameBytes) break;
      char c = text_[i];
      if (c == '"') {
        if (i == pos_) break;
        value->assign(text_.substr(pos_, i - pos_));
        pos_ = i + 1;
        return true;
      }
      if (c == '<' || c == '>' || c == '\n') break;
    }
    status_ = PrefixMatch::kMismatch;
    return false;
  }

  bool ok() const { return status_ == PrefixMatch::kMatch; }
  PrefixMatch status() const { return status_; }
  size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  size_t pos_;
  PrefixMatch status_ = PrefixMatch::kMatch;
};

}  // namespace

DsmlItemParser::DsmlItemParser(std::string block_closer) : block_closer_(std::move(block_closer)) {}

void DsmlItemParser::Reset() {
  phase_ = Phase::kItemStart;
  pos_ = 0;
  search_from_ = 0;
  name_.clear();
  param_name_.clear();
  args_.Clear();
}

ItemResult DsmlItemParser::Parse(std::string_view text) {
  // Each phase either returns or moves to the next phase; the helpers report "moved on" as
  // kNeedMore with a new phase_.
  while (true) {
    switch (phase_) {
      case Phase::kItemStart: {
        ItemResult r = ParseItemStart(text);
        if (r.status != ItemStatus::kNeedMore || phase_ == Phase::kItemStart) return r;
        break;
      }
      case Phase::kBody: {
        ItemResult r = ParseBody(text);
        if (r.status != ItemStatus::kNeedMore || phase_ == Phase::kBody) return r;
        break;
      }
      case Phase::kValue: {
        size_t at = FindResumable(text, kParamCloser, &search_from_);
        if (at == std::string_view::npos) return NeedMore();
        std::string_view value = text.substr(pos_, at - pos_);
        bool added = is_string_param_ ? args_.AddString(param_name_, value)
                                      : args_.AddJson(param_name_, value);
        if (!added) return Malformed();
        pos_ = at + kParamCloser.size();
        phase_ = Phase::kBody;
        break;
      }
      case Phase::kJsonBody: {
        size_t at = FindResumable(text, kInvokeCloser, &search_from_);
        if (at == std::string_view::npos) return NeedMore();
        std::string_view body = TrimSpace(text.substr(pos_, at - pos_));
        if (!IsJsonObject(body)) return Malformed();
        return {ItemStatus::kCall, at + kInvokeCloser.size(), name_, std::string(body)};
      }
    }
  }
}

ItemResult DsmlItemParser::ParseItemStart(std::string_view text) {
  ItemStatus start = ClassifyItemStart(text, &pos_, kInvokeOpener, block_closer_);
  if (start == ItemStatus::kBlockEnd) {
    return {ItemStatus::kBlockEnd, pos_ + block_closer_.size()};
  }
  if (start != ItemStatus::kCall) return {start};
  TagReader tag(text, pos_);
  if (tag.Literal(kInvokeOpener) && tag.Spaces(true) && tag.Attribute("name", &name_) &&
      tag.Spaces(false) && tag.Literal(">")) {
    pos_ = tag.pos();
    phase_ = Phase::kBody;
    return NeedMore();
  }
  return tag.status() == PrefixMatch::kPartial ? NeedMore() : Malformed();
}

ItemResult DsmlItemParser::ParseBody(std::string_view text) {
  pos_ = SkipSpace(text, pos_);
  if (pos_ == text.size()) return NeedMore();
  std::string_view rest = text.substr(pos_);
  if (rest.front() == '{' && args_.is_empty()) {
    phase_ = Phase::kJsonBody;
    search_from_ = pos_;
    return NeedMore();
  }
  PrefixMatch end = MatchPrefix(rest, kInvokeCloser);
  if (end == PrefixMatch::kMatch) {
    return {ItemStatus::kCall, pos_ + kInvokeCloser.size(), name_, args_.Build()};
  }
  TagReader tag(text, pos_);
  std::string flag;
  if (tag.Literal(kParamOpener) && tag.Spaces(true) && tag.Attribute("name", &param_name_) &&
      tag.Spaces(true) && tag.Attribute("string", &flag) && tag.Spaces(false) && tag.Literal(">")) {
    if (flag != "true" && flag != "false") return Malformed();
    is_string_param_ = flag == "true";
    pos_ = tag.pos();
    search_from_ = pos_;
    phase_ = Phase::kValue;
    return NeedMore();
  }
  if (end == PrefixMatch::kPartial || tag.status() == PrefixMatch::kPartial) return NeedMore();
  return Malformed();
}

}  // namespace peregrine::chat
