#include "server/grammar_vocabulary.h"

#include <string>

namespace peregrine::server {

structured::GrammarVocabulary GrammarVocabularyFor(const tokenizer::Tokenizer& tokenizer, int64_t model_vocab_size,
                                                   std::span<const int32_t> stop_token_ids) {
  structured::GrammarVocabulary v;
  v.token_bytes.resize(static_cast<size_t>(model_vocab_size));
  std::vector<int32_t> excluded;
  for (const char* marker : {"<think>", "</think>"})
    if (auto id = tokenizer.SpecialTokenId(marker); id.ok()) excluded.push_back(*id);
  for (int32_t id = 0; id < model_vocab_size && id < tokenizer.id_limit(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    bool skip = false;
    for (int32_t x : excluded) skip = skip || x == id;
    if (!skip) v.token_bytes[static_cast<size_t>(id)] = std::string(tokenizer.TokenBytes(id));
  }
  for (int32_t id : stop_token_ids)
    if (id >= 0 && id < model_vocab_size) v.stop_token_ids.push_back(id);
  return v;
}

}  // namespace peregrine::server
