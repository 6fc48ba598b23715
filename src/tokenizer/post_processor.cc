#include "tokenizer/post_processor.h"

#include <algorithm>
#include <string>

namespace peregrine::tokenizer {
namespace {

Result<std::vector<int32_t>> SpecialTokenIds(const Json& special_tokens, const std::string& name) {
  const Json* entry = FindMember(special_tokens, name);
  const Json* ids = entry == nullptr ? nullptr : FindMember(*entry, "ids");
  if (ids == nullptr || !ids->is_array()) {
    return InvalidArgument("TemplateProcessing.special_tokens has no ids for '" + name + "'");
  }
  std::vector<int32_t> out;
  for (const Json& id : *ids) {
    if (!id.is_number_integer() && !id.is_number_unsigned()) {
      return InvalidArgument("TemplateProcessing.special_tokens['" + name + "'].ids must be integers");
    }
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v > INT32_MAX) return InvalidArgument("TemplateProcessing id out of range");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

}  // namespace

Status PostProcessor::Add(const Json& j, PostProcessor& p) {
  if (j.is_null()) return Status::Ok();
  PG_ASSIGN_OR_RETURN(const std::string type, GetType(j, "post_processor"));
  if (type == "ByteLevel") return Status::Ok();  // only adjusts offsets
  if (type == "Sequence") {
    const Json* list = FindMember(j, "processors");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("post_processor Sequence needs a 'processors' array");
    }
    for (const Json& item : *list) PG_RETURN_IF_ERROR(Add(item, p));
    return Status::Ok();
  }
  if (type != "TemplateProcessing") {
    return Unimplemented("post_processor type '" + type +
                         "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence)");
  }
  const Json* single = FindMember(j, "single");
  const Json* special_tokens = FindMember(j, "special_tokens");
  if (single == nullptr || !single->is_array()) {
    return InvalidArgument("TemplateProcessing.single must be an array");
  }
  bool seen_sequence = false;
  std::vector<int32_t> prefix, suffix;
  for (const Json& item : *single) {
    if (!item.is_object() || item.size() != 1) {
      return InvalidArgument("TemplateProcessing.single items must be one-key objects");
    }
    const auto [kind, body_ptr] = OnlyMember(item);
    const Json& body = *body_ptr;
    PG_ASSIGN_OR_RETURN(const std::string id, GetString(body, "id", "TemplateProcessing item"));
    if (kind == "Sequence") {
      if (id != "A" || seen_sequence) {
        return InvalidArgument("TemplateProcessing.single must hold sequence A exactly once");
      }
      seen_sequence = true;
    } else if (kind == "SpecialToken") {
      if (special_tokens == nullptr) {
        return InvalidArgument("TemplateProcessing needs special_tokens");
      }
      PG_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, SpecialTokenIds(*special_tokens, id));
      auto& target = seen_sequence ? suffix : prefix;
      target.insert(target.end(), ids.begin(), ids.end());
    } else {
      return InvalidArgument("TemplateProcessing item kind '" + kind + "' is unknown");
    }
  }
  if (!seen_sequence) return InvalidArgument("TemplateProcessing.single lacks sequence A");
  // A later processor in a Sequence wraps the output of the earlier ones.
  p.prefix_.insert(p.prefix_.begin(), prefix.begin(), prefix.end());
  p.suffix_.insert(p.suffix_.end(), suffix.begin(), suffix.end());
  return Status::Ok();
}

Result<PostProcessor> PostProcessor::FromJson(const Json& j) {
  PostProcessor p;
  PG_RETURN_IF_ERROR(Add(j, p));
  return p;
}

int32_t PostProcessor::max_id() const {
  int32_t m = -1;
  for (const int32_t id : prefix_) m = std::max(m, id);
  for (const int32_t id : suffix_) m = std::max(m, id);
  return m;
}

void PostProcessor::Apply(std::vector<int32_t>& ids) const {
  ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

}  // namespace peregrine::tokenizer
