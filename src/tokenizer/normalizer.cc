#include "tokenizer/normalizer.h"

#include <utility>

#include "tokenizer/unicode_delta.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {

Status Normalizer::AddSteps(const Json& j, std::vector<Step>& steps) {
  if (j.is_null()) return Status::Ok();
  PG_ASSIGN_OR_RETURN(const std::string type, GetType(j, "normalizer"));
  if (type == "Sequence") {
    const Json* list = FindMember(j, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("normalizer Sequence needs a 'normalizers' array");
    }
    for (const Json& item : *list) PG_RETURN_IF_ERROR(AddSteps(item, steps));
    return Status::Ok();
  }
  if (type == "Prepend") {
    PG_ASSIGN_OR_RETURN(std::string prefix, GetString(j, "prepend", "Prepend"));
    steps.emplace_back(Prepend{std::move(prefix)});
    return Status::Ok();
  }
  if (type == "Strip") {
    PG_ASSIGN_OR_RETURN(const bool left, GetBool(j, "strip_left", "Strip", false));
    PG_ASSIGN_OR_RETURN(const bool right, GetBool(j, "strip_right", "Strip", false));
    steps.emplace_back(Strip{left, right});
    return Status::Ok();
  }
  if (type == "Replace") {
    const Json* pattern = FindMember(j, "pattern");
    if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
      return InvalidArgument("Replace.pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
    PG_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", "Replace"));
    const auto [kind, value_ptr] = OnlyMember(*pattern);
    const Json& value = *value_ptr;
    if (!value.is_string() || (kind != "String" && kind != "Regex")) {
      return InvalidArgument("Replace.pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
    PG_ASSIGN_OR_RETURN(Regex regex,
                        Regex::Compile(value.get<std::string>(), kind == "String"
                                                                     ? Regex::Syntax::kLiteral
                                                                     : Regex::Syntax::kOniguruma));
    steps.emplace_back(Replace{std::move(regex), std::move(content)});
    return Status::Ok();
  }
  return Unimplemented("normalizer type '" + type +
                       "' is not supported (supported: Sequence, Prepend, Replace, Strip)");
}

Result<Normalizer> Normalizer::FromJson(const Json& j) {
  Normalizer n;
  PG_RETURN_IF_ERROR(AddSteps(j, n.steps_));
  for (const Step& step : n.steps_) {
    if (const auto* p = std::get_if<Prepend>(&step)) {
      n.can_insert_unicode_delta_ |= ContainsUnicodeDelta(p->prefix);
    } else if (const auto* r = std::get_if<Replace>(&step)) {
      n.can_insert_unicode_delta_ |= ContainsUnicodeDelta(r->content);
    }
  }
  return n;
}

Status Normalizer::Apply(std::string_view text, MatchScratch& scratch, std::string& out) const {
  out.assign(text);
  std::string next;
  for (const Step& step : steps_) {
    if (const auto* p = std::get_if<Prepend>(&step)) {
      if (!out.empty()) out.insert(0, p->prefix);
    } else if (const auto* s = std::get_if<Strip>(&step)) {
      const size_t end = s->right ? TrailingWhiteSpaceBegin(out) : out.size();
      const size_t begin = s->left ? LeadingWhiteSpaceEnd(std::string_view(out).substr(0, end)) : 0;
      out = out.substr(begin, end - begin);
    } else if (const auto* r = std::get_if<Replace>(&step)) {
      if (out.empty()) continue;  // the reference never matches inside empty text
      next.clear();
      size_t prev = 0;
      const std::string_view current = out;
      PG_RETURN_IF_ERROR(r->pattern.FindAll(current, scratch, [&](size_t begin, size_t end) {
        next.append(current.substr(prev, begin - prev));
        next.append(r->content);
        prev = end;
      }));
      next.append(current.substr(prev));
      out.swap(next);
    }
  }
  return Status::Ok();
}

}  // namespace peregrine::tokenizer
