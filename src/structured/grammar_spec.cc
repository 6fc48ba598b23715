#include "structured/grammar_spec.h"

#include <cstdio>

namespace peregrine::structured {

const char* GrammarKindName(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kChoice: return "choice";
    case GrammarKind::kEbnf: return "grammar";
    case GrammarKind::kStructuralTag: return "structural_tag";
  }
  return "unknown";
}

std::string GrammarSpec::CacheKey() const {
  // Kind, flags, then length-prefixed parts: no two specs share a key.
  std::string key = GrammarKindName(kind);
  key += any_whitespace ? ":ws:" : ":compact:";
  auto part = [&key](const std::string& s) {
    key += std::to_string(s.size());
    key += ':';
    key += s;
  };
  part(source);
  for (const std::string& c : choices) part(c);
  return key;
}

std::string ChoicesToEbnf(const std::vector<std::string>& choices) {
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += " | ";
    out += '"';
    for (unsigned char c : choices[i]) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);  // UTF-8 passes through
      }
    }
    out += '"';
  }
  return out;
}

}  // namespace peregrine::structured
