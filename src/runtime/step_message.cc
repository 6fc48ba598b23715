#include "runtime/step_message.h"

#include <limits>
#include <string>

namespace peregrine {

namespace {

constexpr int32_t kTag = 0x5045521;  // "PER" and a version
constexpr int64_t kChunkWords = 12;  // fixed fields per chunk

enum Flags : int32_t { kFeedsLast = 1, kNeedsLogits = 2, kAllLogits = 4, kKeepHidden = 8 };

bool FitsInt32(int64_t v) { return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(); }

}  // namespace

RankHeader MakeRankHeader(RankCommand command, int64_t payload_words, int32_t argument) {
  const auto c = static_cast<int32_t>(command), n = static_cast<int32_t>(payload_words);
  return {c, n, argument, kTag ^ c ^ n ^ argument};
}

Status ReadRankHeader(const RankHeader& h, RankCommand* command, int64_t* payload_words, int32_t* argument) {
  if ((kTag ^ h[0] ^ h[1] ^ h[2]) != h[3] || h[1] < 0 || h[0] < 1 || h[0] > 3)
    return InvalidArgument("rank message: malformed header (the ranks lost step)");
  *command = static_cast<RankCommand>(h[0]);
  *payload_words = h[1];
  *argument = h[2];
  return Status::Ok();
}

Result<std::vector<int32_t>> EncodeChunks(std::span<const ChunkView> chunks) {
  std::vector<int32_t> w;
  w.push_back(static_cast<int32_t>(chunks.size()));
  for (const ChunkView& c : chunks) {
    if (!FitsInt32(c.first_position) || !FitsInt32(c.num_tokens))
      return InvalidArgument("rank message: a chunk's position or length exceeds int32");
    const int32_t flags = (c.feeds_last ? kFeedsLast : 0) | (c.needs_logits ? kNeedsLogits : 0) |
                          (c.all_logits ? kAllLogits : 0) | (c.keep_hidden ? kKeepHidden : 0);
    const int32_t fields[kChunkWords] = {c.slot,
                                         static_cast<int32_t>(c.first_position),
                                         static_cast<int32_t>(c.num_tokens),
                                         flags,
                                         c.restore,
                                         static_cast<int32_t>(c.tokens.size()),
                                         static_cast<int32_t>(c.blocks.size()),
                                         static_cast<int32_t>(c.snapshots.size()),
                                         static_cast<int32_t>(c.tree_parents.size()),
                                         0,
                                         0,
                                         0};
    w.insert(w.end(), fields, fields + kChunkWords);
  }
  for (const ChunkView& c : chunks) {
    w.insert(w.end(), c.tokens.begin(), c.tokens.end());
    w.insert(w.end(), c.blocks.begin(), c.blocks.end());
    w.insert(w.end(), c.snapshots.begin(), c.snapshots.end());
    w.insert(w.end(), c.tree_parents.begin(), c.tree_parents.end());
  }
  if (!FitsInt32(static_cast<int64_t>(w.size()))) return InvalidArgument("rank message: step too large");
  return w;
}

Result<DecodedChunks> DecodedChunks::Decode(std::span<const int32_t> words) {
  DecodedChunks d;
  d.words_.assign(words.begin(), words.end());
  const std::vector<int32_t>& w = d.words_;
  auto bad = [](const char* what) { return InvalidArgument(std::string("rank message: ") + what); };
  if (w.empty() || w[0] < 0) return bad("no chunk count");
  const auto n = static_cast<size_t>(w[0]);
  if (w.size() < 1 + n * kChunkWords) return bad("truncated chunk fields");
  size_t at = 1 + n * kChunkWords;
  auto take = [&](int32_t count, std::span<const int32_t>* out) -> bool {
    if (count < 0 || at + static_cast<size_t>(count) > w.size()) return false;
    *out = std::span<const int32_t>(w.data() + at, static_cast<size_t>(count));
    at += static_cast<size_t>(count);
    return true;
  };
  d.views_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t* f = w.data() + 1 + i * kChunkWords;
    ChunkView& c = d.views_[i];
    c.slot = f[0];
    c.first_position = f[1];
    c.num_tokens = f[2];
    c.feeds_last = (f[3] & kFeedsLast) != 0;
    c.needs_logits = (f[3] & kNeedsLogits) != 0;
    c.all_logits = (f[3] & kAllLogits) != 0;
    c.keep_hidden = (f[3] & kKeepHidden) != 0;
    c.restore = f[4];
    if (!take(f[5], &c.tokens) || !take(f[6], &c.blocks) || !take(f[7], &c.snapshots) || !take(f[8], &c.tree_parents))
      return bad("truncated chunk arrays");
  }
  if (at != w.size()) return bad("trailing words");
  return d;
}

}  // namespace peregrine
