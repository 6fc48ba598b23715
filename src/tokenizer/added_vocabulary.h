// Added tokens ("added_tokens" in tokenizer.json): strings matched in the input before
// pre-tokenization and emitted as single ids, as HF's AddedVocabulary does.
//
// Matching is leftmost-longest over all tokens of a pass, left to right, non-overlapping.
// Tokens with normalized=false are matched first on the raw text; the rest, with their
// normalized content, on each normalized span in between. single_word, lstrip and rstrip
// refine a match as in the reference (word and space tests use Unicode \w and White_Space).
// Ids follow the reference too: a content already in the model vocabulary keeps its model
// id, others get the next free id after the model vocabulary, in file order.
//
// Thread-safety: immutable after Build.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/function_ref.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"

namespace peregrine::tokenizer {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;

  bool operator==(const AddedToken&) const = default;
};

class AddedVocabulary {
 public:
  // A span of the text handed to Split: an added token (id >= 0) or text to pre-tokenize.
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;
  };
  enum class Pass {
    kRaw,         // tokens with normalized=false, on the input text
    kNormalized,  // the others, on normalized text
  };

  // `j` is the "added_tokens" array (null allowed). `normalizer` gives normalized tokens
  // their matching form.
  static Result<AddedVocabulary> Build(const Json& j, const BpeModel& model,
                                       const Normalizer& normalizer);

  // Calls visit for each segment of `text` in order (segments may be empty text spans; a
  // token's span includes the whitespace lstrip/rstrip absorbed). With parse_special false,
  // tokens marked special are not matched (the reference's encode_special_tokens).
  Status Split(std::string_view text, Pass pass, bool parse_special, MatchScratch& scratch,
               FunctionRef<Status(const Segment&)> visit) const;

  std::optional<int32_t> TokenToId(std::string_view content) const;
  // The added token with this id, or nullptr.
  const AddedToken* FindById(int32_t id) const;
  // What decoding shows for this added id: its normalized content when that differs.
  std::string_view DecodeContent(int32_t id) const;
  // True when `content` is (or once was) added as special; decode skips such tokens.
  bool IsSpecialContent(std::string_view content) const;

  // Number of distinct added contents, and how many of them the model vocabulary also has.
  size_t size() const { return content_to_id_.size(); }
  size_t num_in_model() const { return num_in_model_; }
  int32_t id_limit() const { return static_cast<int32_t>(by_id_.size()); }

 private:
  struct TrieNode {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
    int32_t id = -1;                                      // token ending here
  };
  struct Trie {
    std::vector<TrieNode> nodes;
    std::array<bool, 256> first_byte{};
    std::string first_bytes;  // the distinct first bytes, for memchr when there are few
    bool empty() const { return nodes.size() <= 1; }
    void Add(std::string_view pattern, int32_t id);
    // Position of the next byte at or after `pos` that can start a pattern, or text.size().
    // `cursor` remembers where each first byte occurs next (start with {}), so a scan over
    // one text stays linear.
    struct Cursor {
      std::array<size_t, 2> next{};
      bool started = false;
    };
    size_t NextCandidate(std::string_view text, size_t pos, Cursor& cursor) const;
    // Length of the longest pattern at text[pos..], 0 if none; sets *id.
    size_t LongestAt(std::string_view text, size_t pos, int32_t* id) const;
  };

  void Rebuild(const Normalizer& normalizer, MatchScratch& scratch, Status& status);
  bool IsWordChar(std::string_view text, bool last, MatchScratch& scratch) const;

  StringMap content_to_id_;
  size_t num_in_model_ = 0;
  std::vector<std::optional<AddedToken>> by_id_;
  std::vector<std::string> normalized_content_;  // per id; empty when same as content
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_contents_;
  Trie raw_trie_;
  Trie normalized_trie_;
  std::optional<Regex> word_char_;  // Rust regex \w, for single_word
};

}  // namespace peregrine::tokenizer
