// Tokenizer of the Jinja subset, with Jinja's whitespace rules as Hugging Face configures them:
// trim_blocks (drop the newline after a block or comment tag), lstrip_blocks (drop indentation
// before a block or comment tag), "-"/"+" modifiers, {% raw %}, newline normalization and the
// removal of one trailing newline.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace peregrine::chat::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type = Type::kEof;
  std::string text;  // text data, name, decoded string literal, digits, or operator spelling
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// kInvalidArgument ("template syntax error ...") on unterminated tags, strings or comments,
// unbalanced brackets and characters that start no token.
Result<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

}  // namespace peregrine::chat::jinja
