#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

namespace peregrine::tokenizer {
namespace {

// The pattern HF's ByteLevel pre-tokenizer splits with when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<SplitBehavior> ParseBehavior(const Json& j, std::string_view where,
                                    SplitBehavior fallback) {
  const Json* v = FindMember(j, "behavior");
  if (v == nullptr) return fallback;
  if (!v->is_string()) return InvalidArgument(std::string(where) + ".behavior must be a string");
  const std::string name = v->get<std::string>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument(std::string(where) + ".behavior '" + name + "' is unknown");
}

using Span = PreTokenizerScratch::Span;

// HF NormalizedString::split: turns the pattern's match list into the pieces to keep.
// `spans` covers the piece contiguously; on return it holds the kept spans (is_match unused).
void ApplyBehavior(SplitBehavior behavior, std::vector<Span>& spans) {
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return;
    case SplitBehavior::kRemoved:
      std::erase_if(spans, [](const Span& s) { return s.is_match; });
      return;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  spans.swap(out);
}

}  // namespace

Status PreTokenizer::AddSteps(const Json& j, std::vector<Step>& steps) {
  if (j.is_null()) return Status::Ok();
  PG_ASSIGN_OR_RETURN(const std::string type, GetType(j, "pre_tokenizer"));
  auto add_split = [&](std::string_view pattern, Regex::Syntax syntax, SplitBehavior behavior,
                       bool invert) -> Status {
    PG_ASSIGN_OR_RETURN(Regex regex, Regex::Compile(pattern, syntax));
    steps.emplace_back(SplitStep{std::move(regex), behavior, invert});
    return Status::Ok();
  };
  if (type == "Sequence") {
    const Json* list = FindMember(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("pre_tokenizer Sequence needs a 'pretokenizers' array");
    }
    for (const Json& item : *list) PG_RETURN_IF_ERROR(AddSteps(item, steps));
    return Status::Ok();
  }
  if (type == "Split") {
    const Json* pattern = FindMember(j, "pattern");
    if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
      return InvalidArgument("Split.pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
    const auto [kind, value_ptr] = OnlyMember(*pattern);
    const Json& value = *value_ptr;
    if (!value.is_string() || (kind != "String" && kind != "Regex")) {
      return InvalidArgument("Split.pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
    if (FindMember(j, "behavior") == nullptr) return InvalidArgument("Split needs a behavior");
    PG_ASSIGN_OR_RETURN(const SplitBehavior behavior,
                        ParseBehavior(j, "Split", SplitBehavior::kIsolated));
    PG_ASSIGN_OR_RETURN(const bool invert, GetBool(j, "invert", "Split", false));
    return add_split(value.get<std::string>(),
                     kind == "String" ? Regex::Syntax::kLiteral : Regex::Syntax::kOniguruma,
                     behavior, invert);
  }
  if (type == "ByteLevel") {
    PG_ASSIGN_OR_RETURN(const bool add_prefix_space,
                        GetBool(j, "add_prefix_space", "ByteLevel", true));
    PG_ASSIGN_OR_RETURN(const bool use_regex, GetBool(j, "use_regex", "ByteLevel", true));
    ByteLevelStep step{add_prefix_space, std::nullopt};
    if (use_regex) {
      PG_ASSIGN_OR_RETURN(Regex regex, Regex::Compile(kGpt2Pattern, Regex::Syntax::kOniguruma));
      step.gpt2.emplace(std::move(regex));
    }
    steps.emplace_back(std::move(step));
    return Status::Ok();
  }
  if (type == "Digits") {
    PG_ASSIGN_OR_RETURN(const bool individual, GetBool(j, "individual_digits", "Digits", false));
    return add_split(R"(\p{N})", Regex::Syntax::kOniguruma,
                     individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
  }
  if (type == "Whitespace") {
    // Rust regex \w and \s mean what Oniguruma's do (UTS #18 word, White_Space).
    return add_split(R"(\w+|[^\w\s]+)", Regex::Syntax::kOniguruma, SplitBehavior::kRemoved,
                     true);
  }
  if (type == "WhitespaceSplit") {
    return add_split(R"(\s)", Regex::Syntax::kOniguruma, SplitBehavior::kRemoved, false);
  }
  if (type == "Punctuation") {
    PG_ASSIGN_OR_RETURN(const SplitBehavior behavior,
                        ParseBehavior(j, "Punctuation", SplitBehavior::kIsolated));
    return add_split(R"([\p{P}!-/:-@\[-`{-~])", Regex::Syntax::kPcre2, behavior, false);
  }
  return Unimplemented("pre_tokenizer type '" + type +
                       "' is not supported (supported: Sequence, Split, ByteLevel, Digits, "
                       "Whitespace, WhitespaceSplit, Punctuation)");
}

Result<PreTokenizer> PreTokenizer::FromJson(const Json& j) {
  PreTokenizer p;
  PG_RETURN_IF_ERROR(AddSteps(j, p.steps_));
  for (size_t i = 0; i < p.steps_.size(); ++i) {
    if (!std::holds_alternative<ByteLevelStep>(p.steps_[i])) continue;
    if (i + 1 != p.steps_.size()) {
      return Unimplemented("a ByteLevel pre-tokenizer must be the last step");
    }
    p.is_byte_level_ = true;
  }
  return p;
}

Status PreTokenizer::Run(std::string_view text, PreTokenizerScratch& scratch,
                         FunctionRef<Status(std::string_view)> on_word) const {
  if (text.empty()) return Status::Ok();
  if (scratch.steps.size() < steps_.size()) scratch.steps.resize(steps_.size());
  return RunStep(0, text, scratch, on_word);
}

Status PreTokenizer::RunStep(size_t index, std::string_view piece, PreTokenizerScratch& scratch,
                             FunctionRef<Status(std::string_view)> on_word) const {
  if (index == steps_.size()) return on_word(piece);
  const Step& step = steps_[index];
  if (const auto* split = std::get_if<SplitStep>(&step)) {
    return RunSplit(index, split->regex, split->behavior, split->invert, piece, scratch, on_word);
  }
  const auto& byte_level = std::get<ByteLevelStep>(step);
  if (byte_level.add_prefix_space && piece.front() != ' ') {
    std::string& text = scratch.steps[index].text;
    text.assign(1, ' ');
    text.append(piece);
    piece = text;
  }
  if (!byte_level.gpt2) return RunStep(index + 1, piece, scratch, on_word);
  return RunSplit(index, *byte_level.gpt2, SplitBehavior::kIsolated, false, piece, scratch,
                  on_word);
}

Status PreTokenizer::RunSplit(size_t index, const Regex& regex, SplitBehavior behavior,
                              bool invert, std::string_view piece, PreTokenizerScratch& scratch,
                              FunctionRef<Status(std::string_view)> on_word) const {
  if (behavior == SplitBehavior::kIsolated) {
    // Matches and the text between them are all kept, so stream them without a list.
    Status status;
    size_t prev = 0;
    auto emit = [&](size_t begin, size_t end) {
      if (status.ok() && end > begin) {
        status = RunStep(index + 1, piece.substr(begin, end - begin), scratch, on_word);
      }
    };
    PG_RETURN_IF_ERROR(regex.FindAll(piece, scratch.match, [&](size_t begin, size_t end) {
      emit(prev, begin);
      emit(begin, end);
      prev = end;
    }));
    emit(prev, piece.size());
    return status;
  }
  std::vector<Span>& spans = scratch.steps[index].spans;
  spans.clear();
  size_t prev = 0;
  PG_RETURN_IF_ERROR(regex.FindAll(piece, scratch.match, [&](size_t begin, size_t end) {
    if (begin != prev) spans.push_back({prev, begin, invert});
    spans.push_back({begin, end, !invert});
    prev = end;
  }));
  if (prev != piece.size()) spans.push_back({prev, piece.size(), invert});
  ApplyBehavior(behavior, spans);
  // Later steps use their own buffers, so this list stays intact while recursing.
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span s = spans[i];
    if (s.end > s.begin) {
      PG_RETURN_IF_ERROR(RunStep(index + 1, piece.substr(s.begin, s.end - s.begin), scratch,
                                 on_word));
    }
  }
  return Status::Ok();
}

}  // namespace peregrine::tokenizer
