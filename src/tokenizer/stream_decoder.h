// Incremental detokenization for streaming output: ids arrive one at a time and each call
// returns the text they complete.
//
// Invariants: every returned piece is valid UTF-8; bytes of a character split across tokens
// are held back until the character completes; bytes that can no longer form a valid
// character become U+FFFD at once; Flush returns the rest as a full decode would show it.
// So the concatenation of all pieces (and Flush) equals Tokenizer::Decode of the same ids
// with the same skip_special_tokens.
//
// Ownership: one StreamDecoder per output stream, used by one thread at a time; it refers
// to the Tokenizer, which must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace peregrine::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Appends the text completed by `id` to `out` (possibly nothing). Ids with no token are
  // ignored, as Decode ignores them.
  void Push(int32_t id, std::string& out);
  std::string Push(int32_t id) {
    std::string out;
    Push(id, out);
    return out;
  }

  // Appends whatever is held back (an incomplete character becomes U+FFFD) and resets.
  void Flush(std::string& out);
  std::string Flush() {
    std::string out;
    Flush(out);
    return out;
  }

  // Bytes held back waiting for the rest of a character (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace peregrine::tokenizer
