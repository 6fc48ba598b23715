#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

Result<AddedToken> ParseAddedToken(const Json& j, size_t index, int64_t* file_id) {
  const std::string where = "added_tokens[" + std::to_string(index) + "]";
  if (!j.is_object()) return InvalidArgument(where + " must be an object");
  AddedToken t;
  PG_ASSIGN_OR_RETURN(t.content, GetString(j, "content", where));
  for (auto [key, field] : {std::pair{"single_word", &t.single_word}, {"lstrip", &t.lstrip},
                            {"rstrip", &t.rstrip}, {"normalized", &t.normalized},
                            {"special", &t.special}}) {
    const Json* v = FindMember(j, key);
    if (v == nullptr || !v->is_boolean()) {
      return InvalidArgument(where + "." + key + " must be a boolean");
    }
    *field = v->get<bool>();
  }
  const Json* id = FindMember(j, "id");
  if (id == nullptr || !(id->is_number_integer() || id->is_number_unsigned())) {
    return InvalidArgument(where + ".id must be an integer");
  }
  *file_id = id->get<int64_t>();
  return t;
}

}  // namespace

void AddedVocabulary::Trie::Add(std::string_view pattern, int32_t id) {
  if (nodes.empty()) nodes.emplace_back();
  uint32_t node = 0;
  for (const char ch : pattern) {
    const auto c = static_cast<uint8_t>(ch);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), c,
                               [](const auto& child, uint8_t b) { return child.first < b; });
    if (it != children.end() && it->first == c) {
      node = it->second;
      continue;
    }
    const auto child = static_cast<uint32_t>(nodes.size());
    children.insert(it, {c, child});
    nodes.emplace_back();  // invalidates `children`, which is not used again
    node = child;
  }
  nodes[node].id = id;
  if (!pattern.empty() && !first_byte[static_cast<uint8_t>(pattern[0])]) {
    first_byte[static_cast<uint8_t>(pattern[0])] = true;
    first_bytes.push_back(pattern[0]);
  }
}

size_t AddedVocabulary::Trie::NextCandidate(std::string_view text, size_t pos,
                                            Cursor& cursor) const {
  if (first_bytes.size() <= cursor.next.size()) {
    // Typical files start every token with '<' (and maybe one more byte): let memchr scan.
    size_t best = text.size();
    for (size_t k = 0; k < first_bytes.size(); ++k) {
      size_t& next = cursor.next[k];
      if (!cursor.started || next < pos) {
        const void* hit = std::memchr(text.data() + pos, first_bytes[k], text.size() - pos);
        next = hit == nullptr ? text.size()
                              : static_cast<size_t>(static_cast<const char*>(hit) - text.data());
      }
      best = std::min(best, next);
    }
    cursor.started = true;
    return best;
  }
  while (pos < text.size() && !first_byte[static_cast<uint8_t>(text[pos])]) ++pos;
  return pos;
}

size_t AddedVocabulary::Trie::LongestAt(std::string_view text, size_t pos, int32_t* id) const {
  size_t best = 0;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    const auto it = std::lower_bound(children.begin(), children.end(), c,
                                     [](const auto& child, uint8_t b) { return child.first < b; });
    if (it == children.end() || it->first != c) break;
    node = it->second;
    if (nodes[node].id >= 0) {
      best = i + 1 - pos;
      *id = nodes[node].id;
    }
  }
  return best;
}

Result<AddedVocabulary> AddedVocabulary::Build(const Json& j, const BpeModel& model,
                                               const Normalizer& normalizer) {
  AddedVocabulary v;
  // The reference tests single_word boundaries with Rust's regex crate, whose \w is UTS #18
  // "word" (Oniguruma's differs in the joiners and Latin-1 fractions).
  PG_ASSIGN_OR_RETURN(Regex word_char,
                      Regex::Compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])",
                                     Regex::Syntax::kPcre2));
  v.word_char_.emplace(std::move(word_char));
  if (j.is_null()) return v;
  if (!j.is_array()) return InvalidArgument("added_tokens must be an array");
  MatchScratch scratch;
  int64_t next_id = static_cast<int64_t>(model.vocab_size());
  for (size_t i = 0; i < j.size(); ++i) {
    int64_t file_id = 0;
    PG_ASSIGN_OR_RETURN(AddedToken token, ParseAddedToken(j[i], i, &file_id));
    if (token.content.empty()) continue;
    if (!IsValidUtf8(token.content)) {
      return InvalidArgument("added_tokens[" + std::to_string(i) + "] is not valid UTF-8");
    }
    int64_t id;
    if (const auto known = v.TokenToId(token.content)) {
      if (v.FindById(*known) != nullptr && *v.FindById(*known) == token) continue;
      id = *known;
    } else if (const auto model_id = model.TokenToId(token.content)) {
      id = *model_id;
    } else {
      // The file's own id is ignored, as in the reference (which only warns on a mismatch).
      id = next_id++;
    }
    if (id > kMaxTokenId) return InvalidArgument("added token id beyond the supported range");
    const auto index = static_cast<size_t>(id);
    if (index >= v.by_id_.size()) {
      v.by_id_.resize(index + 1);
      v.normalized_content_.resize(index + 1);
    }
    if (token.normalized && !normalizer.is_identity()) {
      std::string normalized;
      PG_RETURN_IF_ERROR(normalizer.Apply(token.content, scratch, normalized));
      if (normalized != token.content) v.normalized_content_[index] = std::move(normalized);
    }
    v.content_to_id_[token.content] = static_cast<int32_t>(id);
    if (token.special) v.special_contents_.insert(token.content);
    v.by_id_[index] = std::move(token);
  }
  for (const auto& [content, id] : v.content_to_id_) {
    if (model.TokenToId(content)) ++v.num_in_model_;
  }
  // Tries over the final id -> token table, as the reference rebuilds them.
  for (size_t id = 0; id < v.by_id_.size(); ++id) {
    const auto& token = v.by_id_[id];
    if (!token) continue;
    if (token->normalized) {
      const std::string& pattern =
          v.normalized_content_[id].empty() ? token->content : v.normalized_content_[id];
      if (!pattern.empty()) v.normalized_trie_.Add(pattern, static_cast<int32_t>(id));
    } else {
      v.raw_trie_.Add(token->content, static_cast<int32_t>(id));
    }
  }
  return v;
}

std::optional<int32_t> AddedVocabulary::TokenToId(std::string_view content) const {
  const auto it = content_to_id_.find(content);
  if (it == content_to_id_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= by_id_.size()) return nullptr;
  const auto& token = by_id_[static_cast<size_t>(id)];
  return token ? &*token : nullptr;
}

std::string_view AddedVocabulary::DecodeContent(int32_t id) const {
  const AddedToken* token = FindById(id);
  if (token == nullptr) return {};
  const std::string& normalized = normalized_content_[static_cast<size_t>(id)];
  return normalized.empty() ? std::string_view(token->content) : std::string_view(normalized);
}

bool AddedVocabulary::IsSpecialContent(std::string_view content) const {
  return special_contents_.find(content) != special_contents_.end();
}

bool AddedVocabulary::IsWordChar(std::string_view text, bool last, MatchScratch& scratch) const {
  if (text.empty()) return false;
  size_t begin = 0;
  if (last) {
    begin = text.size() - 1;
    while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  }
  const std::string_view ch =
      text.substr(begin, Utf8SequenceLength(static_cast<uint8_t>(text[begin])));
  bool found = false;
  // Matching one character cannot exhaust PCRE2's limits; an error would leave found false.
  (void)word_char_->FindAll(ch, scratch, [&](size_t b, size_t e) { found = found || e > b; });
  return found;
}

Status AddedVocabulary::Split(std::string_view text, Pass pass, bool parse_special,
                              MatchScratch& scratch,
                              FunctionRef<Status(const Segment&)> visit) const {
  const Trie& trie = pass == Pass::kRaw ? raw_trie_ : normalized_trie_;
  if (trie.empty() || text.empty()) return visit(Segment{0, text.size(), -1});
  size_t start_offset = 0;
  size_t pos = 0;
  Trie::Cursor cursor;
  while ((pos = trie.NextCandidate(text, pos, cursor)) < text.size()) {
    int32_t id = -1;
    const size_t length = trie.LongestAt(text, pos, &id);
    if (length == 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;  // the next match starts after this one even if this one is dropped
    const AddedToken& token = *by_id_[static_cast<size_t>(id)];
    if (!parse_special && IsSpecialContent(token.content)) continue;
    if (token.single_word) {
      const bool space_before = start == 0 || !IsWordChar(text.substr(0, start), true, scratch);
      const bool space_after =
          stop == text.size() || !IsWordChar(text.substr(stop), false, scratch);
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(TrailingWhiteSpaceBegin(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += LeadingWhiteSpaceEnd(text.substr(stop));
    if (start_offset < start) PG_RETURN_IF_ERROR(visit(Segment{start_offset, start, -1}));
    PG_RETURN_IF_ERROR(visit(Segment{start, stop, id}));
    start_offset = stop;
  }
  if (start_offset != text.size()) PG_RETURN_IF_ERROR(visit(Segment{start_offset, text.size(), -1}));
  return Status::Ok();
}

}  // namespace peregrine::tokenizer
