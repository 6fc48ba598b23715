// Structured outputs on the fixtures: a grammar over a fixture's vocabulary read as letters
// (id -> 'a' + id % 26; the model's EOS ids are the stop tokens), so engine tests can check
// that a real model's constrained output matches a regex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "config/model_config.h"
#include "structured/grammar_engine.h"

namespace peregrine::testing {

std::string LetterOf(int64_t id);
// The letters of `tokens` without a trailing stop token.
std::string LetterText(const std::vector<int32_t>& tokens);

struct LetterGrammar {
  std::unique_ptr<structured::GrammarEngine> engine;
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};
Result<LetterGrammar> CompileLetterRegex(const ModelConfig& config, const std::string& regex);

}  // namespace peregrine::testing
