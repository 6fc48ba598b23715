// Reads tokenizer.json in one streaming pass. The model's vocabulary and merges (hundreds of
// thousands of strings) go straight into flat vectors; everything else becomes a small JSON
// tree for the components to read. This keeps loading a DeepSeek file well under a second.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_util.h"

namespace peregrine::tokenizer {

struct BpeTables {
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  // Merges in the form the file used: "a b" lines, or ["a", "b"] pairs.
  bool merges_are_lines = false;
  std::vector<std::string> merge_lines;
  std::vector<std::pair<std::string, std::string>> merge_pairs;
};

struct TokenizerFile {
  Json root;  // the whole file except model.vocab and model.merges
  BpeTables bpe;
};

// Fails with kInvalidArgument for malformed JSON (with the byte offset) or for a vocab or
// merges value of the wrong shape.
Result<TokenizerFile> ParseTokenizerJson(std::string_view text);

}  // namespace peregrine::tokenizer
