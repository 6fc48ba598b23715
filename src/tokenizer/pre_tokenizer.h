// The tokenizer.json "pre_tokenizer": splits each span between added tokens into the words
// the model encodes independently.
//
// Supported: Sequence, Split (String or Regex pattern; Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex with the GPT-2
// pattern), Digits, Whitespace, WhitespaceSplit, Punctuation. Other types are rejected with
// kUnimplemented. ByteLevel must come last: it turns text into byte symbols, which this
// implementation keeps as raw bytes (the model looks them up in byte space).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "tokenizer/function_ref.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace peregrine::tokenizer {

// How a Split step treats the pattern's matches (HF SplitDelimiterBehavior).
enum class SplitBehavior {
  kRemoved,
  kIsolated,
  kMergedWithPrevious,
  kMergedWithNext,
  kContiguous,
};

// Per-thread buffers for PreTokenizer::Run.
struct PreTokenizerScratch {
  struct Span {
    size_t begin;
    size_t end;
    bool is_match;
  };
  struct Step {
    std::vector<Span> spans;
    std::string text;
  };
  MatchScratch match;
  std::vector<Step> steps;
};

class PreTokenizer {
 public:
  // `j` is the "pre_tokenizer" value (null allowed: the whole span is one word).
  static Result<PreTokenizer> FromJson(const Json& j);

  // True when a ByteLevel step is present: words are then raw bytes for a byte-level model.
  bool is_byte_level() const { return is_byte_level_; }

  // Calls on_word for every non-empty word of `text` (valid UTF-8), in order. Stops at and
  // returns the first error from on_word or from matching.
  Status Run(std::string_view text, PreTokenizerScratch& scratch,
             FunctionRef<Status(std::string_view)> on_word) const;

 private:
  struct SplitStep {
    Regex regex;
    SplitBehavior behavior;
    bool invert;
  };
  struct ByteLevelStep {
    bool add_prefix_space;
    std::optional<Regex> gpt2;  // the GPT-2 pattern when use_regex
  };
  using Step = std::variant<SplitStep, ByteLevelStep>;

  static Status AddSteps(const Json& j, std::vector<Step>& steps);
  Status RunStep(size_t index, std::string_view piece, PreTokenizerScratch& scratch,
                 FunctionRef<Status(std::string_view)> on_word) const;
  Status RunSplit(size_t index, const Regex& regex, SplitBehavior behavior, bool invert,
                  std::string_view piece, PreTokenizerScratch& scratch,
                  FunctionRef<Status(std::string_view)> on_word) const;

  std::vector<Step> steps_;
  bool is_byte_level_ = false;
};

}  // namespace peregrine::tokenizer
