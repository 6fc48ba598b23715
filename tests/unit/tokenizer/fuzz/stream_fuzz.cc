// Fuzz target: the streaming detokenizer over arbitrary ids. Byte 0 selects
// skip_special_tokens; each following pair of bytes is one id, spread over the whole id
// range plus a few ids without a token. Invariants: every piece is valid UTF-8 and the
// pieces concatenate to Decode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_tokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine::tokenizer;
  if (size == 0) return 0;
  const Tokenizer& t = FuzzTokenizer();
  const bool skip_special = (data[0] & 1) != 0;
  const int64_t span = int64_t{t.id_limit()} + 4;
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size; i += 2) {
    const uint32_t raw = uint32_t{data[i]} | (uint32_t{data[i + 1]} << 8);
    // Low raw values stay low (single bytes live there) and the rest spreads over all ids.
    const int64_t id = raw < 512 ? raw : (int64_t{raw} * span) / 65536;
    ids.push_back(static_cast<int32_t>(id - (raw % 7 == 0 ? 2 : 0)));
  }
  StreamDecoder stream(t, skip_special);
  std::string all;
  std::string piece;
  for (const int32_t id : ids) {
    piece.clear();
    stream.Push(id, piece);
    PG_CHECK(IsValidUtf8(piece), "a streamed piece is not valid UTF-8");
    PG_CHECK(stream.num_pending_bytes() <= 3, "more than a partial character held back");
    all += piece;
  }
  piece.clear();
  stream.Flush(piece);
  PG_CHECK(IsValidUtf8(piece), "the flushed rest is not valid UTF-8");
  all += piece;
  PG_CHECK(all == t.Decode(ids, skip_special), "streamed pieces differ from Decode");
  return 0;
}
