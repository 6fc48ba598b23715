// The tokenizer.json "model" of type BPE: vocabulary, ranked merges, and the word -> ids step.
//
// In byte-level mode (the pre-tokenizer ends with ByteLevel) words arrive as raw bytes and
// each byte is looked up through GPT-2's byte alphabet, which is what the reference does
// after mapping the text; otherwise each UTF-8 character is one initial symbol.
// Supported options: unk_token, fuse_unk, byte_fallback, ignore_merges. Dropout (random),
// continuing_subword_prefix and end_of_word_suffix are rejected with kUnimplemented.
//
// Thread-safety: immutable after FromJson; Tokenize uses only the caller's BpeScratch.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_merges.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/word_cache.h"

namespace peregrine::tokenizer {

// Hash for string-keyed maps that accept string_view lookups without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Per-thread buffers for BpeModel::Tokenize.
struct BpeScratch {
  WordCache cache;
  MergeScratch merge;
  std::vector<int32_t> symbols;
  std::string key;
};

// Token ids are dense enough to index vectors; a file asking for more is rejected.
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

class BpeModel {
 public:
  // `j` is the "model" object without its vocab and merges, which come in `tables`.
  static Result<BpeModel> Build(const Json& j, BpeTables tables, bool is_byte_level);

  // Number of vocabulary entries (what the reference calls the model's vocab size).
  size_t vocab_size() const { return vocab_.size(); }
  // One past the largest id in the vocabulary (0 when empty).
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocabulary string of `id`, or nullptr when no entry has that id.
  const std::string* IdToToken(int32_t id) const;

  // Appends the ids of `word` (non-empty) to `out`. Fails only when an unknown symbol needs
  // an unk_token that is missing from the vocabulary.
  Status Tokenize(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

 private:
  Status BuildSymbols(std::string_view word, BpeScratch& scratch) const;
  Status AddUnknown(std::string_view key, size_t num_bytes, BpeScratch& scratch,
                    std::optional<std::pair<int32_t, size_t>>& pending_unk) const;

  StringMap vocab_;  // token string (as in the file) -> id
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  MergeTable merges_;
  bool is_byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::optional<std::string> unk_token_;
  // Byte-level mode: id of each byte's alphabet symbol (-1 when missing), and the
  // vocabulary keyed by raw bytes for ignore_merges.
  std::array<int32_t, 256> byte_ids_{};
  bool has_all_bytes_ = false;
  StringMap byte_vocab_;
};

}  // namespace peregrine::tokenizer
