// Shared setup for the tokenizer fuzz targets: the tokenizer under test, loaded once per
// process. PEREGRINE_TOKENIZER_FUZZ_JSON (environment) may name another tokenizer.json, e.g.
// the DeepSeek-V4 file; the default is the committed tiny fixture.
#pragma once

#include <cstdlib>

#include "base/check.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::tokenizer {

inline const Tokenizer& FuzzTokenizer() {
  static const Tokenizer* tokenizer = [] {
    const char* path = std::getenv("PEREGRINE_TOKENIZER_FUZZ_JSON");
    auto t = Tokenizer::FromFile(path != nullptr ? path : PEREGRINE_TOKENIZER_FIXTURE);
    PG_CHECK(t.ok(), "cannot load the fuzz tokenizer");
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

}  // namespace peregrine::tokenizer
