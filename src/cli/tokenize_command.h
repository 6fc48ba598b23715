#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::cli {

// `peregrine tokenize` (text -> ids) and `peregrine detokenize` (ids -> text), both with
// `--tokenizer PATH` naming a tokenizer.json or a model directory holding one. Text and ids
// come from the positional arguments or, when there are none, from stdin.
void AddTokenizerCommands(CLI::App& app);

// The work behind the commands, without I/O.
struct TokenizeFlags {
  bool parse_special = true;        // match special tokens written in the text
  bool add_special_tokens = false;  // apply the file's post-processor template
  bool json = false;                // print a JSON array instead of space-separated ids
  bool show_tokens = false;         // print "id<TAB>token" lines
};
// Ids of `text` formatted per `flags`, newline-terminated.
Result<std::string> TokenizeToString(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                                     const TokenizeFlags& flags);

// Parses ids separated by spaces, commas or newlines (a JSON array works too) and decodes
// them. Fails with kInvalidArgument for anything that is not an id below id_limit().
Result<std::string> DetokenizeString(const tokenizer::Tokenizer& tokenizer, std::string_view ids,
                                     bool skip_special_tokens);

}  // namespace peregrine::cli
