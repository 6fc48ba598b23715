#include "letter_grammar.h"

namespace peregrine::testing {

std::string LetterOf(int64_t id) { return std::string(1, static_cast<char>('a' + id % 26)); }

std::string LetterText(const std::vector<int32_t>& tokens) {
  std::string text;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) text += LetterOf(tokens[t]);
  return text;
}

Result<LetterGrammar> CompileLetterRegex(const ModelConfig& config, const std::string& regex) {
  structured::GrammarVocabulary v;
  for (int64_t id = 0; id < config.vocab_size; ++id) v.token_bytes.push_back(LetterOf(id));
  for (int64_t id : config.eos_token_ids) {
    v.token_bytes[static_cast<size_t>(id)].clear();
    v.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  if (v.stop_token_ids.empty()) return InvalidArgument("the model has no EOS id");
  LetterGrammar out;
  PG_ASSIGN_OR_RETURN(out.engine, structured::GrammarEngine::Create(std::move(v)));
  structured::GrammarSpec spec;
  spec.kind = structured::GrammarKind::kRegex;
  spec.source = regex;
  PG_ASSIGN_OR_RETURN(out.grammar, out.engine->Compile(spec));
  return out;
}

}  // namespace peregrine::testing
