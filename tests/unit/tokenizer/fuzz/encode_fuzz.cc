// Fuzz target: Encode over arbitrary bytes. Byte 0 selects parse_special and
// add_special_tokens; the rest is the text. Invariants: Encode succeeds, every id has a
// token, decoding gives the repaired text back (when no lstrip/rstrip token can absorb
// spaces), and streaming the ids reproduces Decode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_tokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine::tokenizer;
  if (size == 0) return 0;
  const Tokenizer& t = FuzzTokenizer();
  const bool parse_special = (data[0] & 1) != 0;
  const bool add_special_tokens = (data[0] & 2) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto ids = t.Encode(text, parse_special, add_special_tokens);
  PG_CHECK(ids.ok(), "Encode failed");
  for (const int32_t id : *ids) PG_CHECK(t.IdToToken(id).has_value(), "id without a token");
  const std::string decoded = t.Decode(*ids);
  PG_CHECK(IsValidUtf8(decoded), "Decode produced invalid UTF-8");
  std::string repaired;
  AppendUtf8Lossy(text, /*is_final=*/true, repaired);
  const bool may_strip = text.find('[') != std::string_view::npos;  // the fixture's [L] [R] [LR]
  if (!add_special_tokens && !may_strip && std::getenv("PEREGRINE_TOKENIZER_FUZZ_JSON") == nullptr) {
    PG_CHECK(decoded == repaired, "Decode(Encode(text)) != text");
  }
  StreamDecoder stream(t);
  std::string streamed;
  for (const int32_t id : *ids) stream.Push(id, streamed);
  stream.Flush(streamed);
  PG_CHECK(streamed == decoded, "streamed pieces differ from Decode");
  return 0;
}
