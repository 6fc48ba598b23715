// A byte-level BPE tokenizer loaded from a HF tokenizer.json, producing the same ids as HF
// `tokenizers` for the same text (DeepSeek V3/V4 files and others of the same shape).
//
// Input contract: Encode takes bytes. Valid UTF-8 is encoded as the reference encodes the
// equal Python str. Ill-formed UTF-8 is first repaired the way Python's
// `bytes.decode("utf-8", errors="replace")` does (one U+FFFD per maximal ill-formed subpart;
// a UTF-8-encoded surrogate such as ED A0 80 becomes three), so the result equals the
// reference on the repaired str. (The reference cannot take lone surrogates at all: a Python
// str holding one fails to convert.)
//
// Thread-safety: a Tokenizer is immutable after loading; Encode, Decode and the lookups may
// run concurrently from any number of threads. Encode borrows per-thread scratch (regex
// match data, a word cache) from an internal pool.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace peregrine::tokenizer {

class Tokenizer {
 public:
  // Reads `path`, or `path`/tokenizer.json when `path` is a directory. Fails with kNotFound
  // for a missing file, kInvalidArgument for a malformed one, kUnimplemented for a valid file
  // using a component this implementation does not support (the message names it).
  static Result<Tokenizer> FromFile(const std::filesystem::path& path);
  static Result<Tokenizer> FromJson(std::string_view json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. parse_special=false leaves tokens flagged "special" unmatched (they are
  // encoded as plain text), which is HF's encode_special_tokens=True; added tokens not
  // flagged special (DeepSeek V4's <think>, <｜User｜>) are still matched, as in HF.
  // add_special_tokens applies the file's post-processor template (e.g. a BOS); DeepSeek V4's
  // ByteLevel post-processor adds nothing. Fails only if regex matching exceeds PCRE2's
  // limits (kResourceExhausted) or the file's unk_token is unusable (kInvalidArgument).
  Result<std::vector<int32_t>> Encode(std::string_view text, bool parse_special = true,
                                      bool add_special_tokens = false) const;

  // Ids to text, as HF's decode: ids with no token are dropped, skip_special_tokens drops
  // tokens flagged special, and the decoder's bytes are repaired into valid UTF-8 as a whole.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The decoder's raw bytes for one id (possibly a fragment of a UTF-8 character); empty for
  // ids with no token. The building block of StreamDecoder.
  std::string_view TokenBytes(int32_t id) const;
  // True for ids whose token skip_special_tokens drops.
  bool IsSpecial(int32_t id) const;

  // Token string (as in the file, added tokens first) to id, and back.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::optional<std::string_view> IdToToken(int32_t id) const;
  // The id of an added token by its content, e.g. "<think>"; kNotFound when there is none.
  Result<int32_t> SpecialTokenId(std::string_view content) const;

  // Distinct tokens, model and added (HF get_vocab_size(with_added_tokens=True)).
  size_t vocab_size() const;
  // One past the largest id; every valid id is below it.
  int32_t id_limit() const;

 private:
  struct State;
  class ScratchPool;
  explicit Tokenizer(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
  std::unique_ptr<ScratchPool> pool_;
};

}  // namespace peregrine::tokenizer
