// A compiled PCRE2 pattern (JIT when available) with Oniguruma's match enumeration, and the
// per-thread scratch that matching needs.
//
// Thread-safety: a Regex is immutable after Compile and may be shared by any number of
// threads; each thread brings its own MatchScratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/function_ref.h"

namespace peregrine::tokenizer {

// Match data and JIT stack for one thread at a time.
class MatchScratch {
 public:
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  // Promise that the texts matched from now on hold no character of UnicodeDeltaRanges()
  // (see ContainsUnicodeDelta), so the faster compilation of each pattern gives the same
  // matches. Off by default.
  void set_is_text_delta_free(bool is_free) { is_text_delta_free_ = is_free; }

 private:
  friend class Regex;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool is_text_delta_free_ = false;
};

class Regex {
 public:
  enum class Syntax {
    kOniguruma,  // what tokenizer.json "Regex" patterns are written in; translated first
    kPcre2,      // native PCRE2 syntax, compiled with UTF and UCP
    kLiteral,    // the pattern is plain text
  };

  // Fails with kInvalidArgument for a malformed pattern and kUnimplemented for Oniguruma
  // constructs without a faithful PCRE2 translation.
  static Result<Regex> Compile(std::string_view pattern, Syntax syntax);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Calls on_match(begin, end) for each match in `text` (valid UTF-8) in the order
  // Oniguruma's find_iter yields them: non-overlapping, left to right, and an empty match
  // right where the previous match ended is skipped by advancing one character. Fails only
  // when PCRE2 gives up (match or JIT stack limits); matches reported so far stand.
  Status FindAll(std::string_view text, MatchScratch& scratch,
                 FunctionRef<void(size_t, size_t)> on_match) const;

  // The PCRE2 pattern actually compiled (after translation).
  const std::string& compiled_pattern() const { return compiled_pattern_; }

 private:
  struct Code {
    void* code = nullptr;  // pcre2_code_8*, kept opaque so callers need no PCRE2 headers
    bool is_jit = false;
  };
  Regex() = default;
  static Result<Code> CompileCode(const std::string& pattern, uint32_t options,
                                  std::string_view source);
  static void Free(Code& code);

  Code exact_;
  Code fast_;  // without the newer Unicode characters; empty when the same as exact_
  std::string compiled_pattern_;
};

}  // namespace peregrine::tokenizer
