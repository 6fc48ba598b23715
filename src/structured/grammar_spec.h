// What a request constrains its output to: a JSON schema, any JSON object, a regular
// expression, one of a list of strings, an EBNF grammar, or a structural tag (text with
// tagged, schema-constrained regions: how forced tool calls are written). A spec is a plain
// value; GrammarEngine compiles it against the vocabulary.
#pragma once

#include <string>
#include <vector>

namespace peregrine::structured {

// Longest whitespace run a JSON grammar allows between tokens: a newline and 8 levels of
// 4-space indentation, not endless padding.
inline constexpr int kMaxJsonWhitespace = 33;

enum class GrammarKind {
  kJsonSchema,     // source: the schema's JSON text
  kJsonObject,     // any JSON object (OpenAI's json_object)
  kRegex,          // source: the pattern (ECMAScript-like syntax, as xgrammar reads it)
  kChoice,         // choices: exactly one of these strings
  kEbnf,           // source: GBNF-style EBNF, root rule "root"
  kStructuralTag,  // source: xgrammar's structural-tag JSON
};

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string source;
  std::vector<std::string> choices;
  // JSON kinds: whitespace anywhere JSON allows it, at most kMaxJsonWhitespace characters in
  // a row (false: the compact form only). Unbounded runs let a weak model pad forever.
  bool any_whitespace = true;

  // Equal for specs that compile to the same grammar (the compile cache's key).
  std::string CacheKey() const;
};

const char* GrammarKindName(GrammarKind kind);

// An EBNF grammar whose language is exactly `choices` (each a UTF-8 string; escaped here).
std::string ChoicesToEbnf(const std::vector<std::string>& choices);

}  // namespace peregrine::structured
