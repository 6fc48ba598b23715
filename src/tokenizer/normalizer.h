// The tokenizer.json "normalizer": text rewriting applied to every span between added
// tokens before pre-tokenization. Supported: null, Sequence, Prepend, Replace, Strip.
// Unicode normalization forms and case mapping are rejected with kUnimplemented.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace peregrine::tokenizer {

class Normalizer {
 public:
  // `j` is the "normalizer" value (null allowed).
  static Result<Normalizer> FromJson(const Json& j);

  // True when Apply never changes text (no steps), so callers can skip it.
  bool is_identity() const { return steps_.empty(); }
  // True when Apply may insert characters of UnicodeDeltaRanges() (from its own strings).
  bool can_insert_unicode_delta() const { return can_insert_unicode_delta_; }

  // Normalizes `text` (valid UTF-8) into `out` (cleared first).
  Status Apply(std::string_view text, MatchScratch& scratch, std::string& out) const;

 private:
  struct Prepend {
    std::string prefix;
  };
  struct Replace {
    Regex pattern;
    std::string content;
  };
  struct Strip {
    bool left;
    bool right;
  };
  using Step = std::variant<Prepend, Replace, Strip>;

  static Status AddSteps(const Json& j, std::vector<Step>& steps);

  std::vector<Step> steps_;
  bool can_insert_unicode_delta_ = false;
};

}  // namespace peregrine::tokenizer
