// The model's vocabulary as structured outputs' grammars see it (structured/grammar_engine.h):
// each id's decoded bytes, except ids a constrained output must never contain: special tokens
// (BOS, EOS, padding, reserved), ids past the tokenizer, and the reasoning markers <think> and
// </think>. EOS ids are the stop tokens, allowed once the grammar is complete.
#pragma once

#include <cstdint>
#include <span>

#include "structured/grammar_engine.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server {

structured::GrammarVocabulary GrammarVocabularyFor(const tokenizer::Tokenizer& tokenizer, int64_t model_vocab_size,
                                                   std::span<const int32_t> stop_token_ids);

}  // namespace peregrine::server
