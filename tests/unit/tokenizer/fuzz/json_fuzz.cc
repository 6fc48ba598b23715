// Fuzz target: loading tokenizer.json from arbitrary bytes. Loading returns a Status for
// anything malformed; when it succeeds, the tokenizer must encode and decode a fixed text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine::tokenizer;
  auto t = Tokenizer::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  for (const std::string_view text : {std::string_view("Hello, world! 123 中文 😀 <think>x"),
                                      std::string_view("\xFF\xED\xA0\x80  \n\t")}) {
    auto ids = t->Encode(text);
    if (!ids.ok()) continue;  // e.g. a file whose unk_token is missing from its vocabulary
    for (const int32_t id : *ids) PG_CHECK(id >= 0 && id < t->id_limit(), "id out of range");
    PG_CHECK(IsValidUtf8(t->Decode(*ids)), "Decode produced invalid UTF-8");
  }
  return 0;
}
