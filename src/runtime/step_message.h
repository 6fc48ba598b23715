// What the leader rank of a sharded CUDA executor tells the others each time it acts, so that
// every rank runs the same device work in the same order (runtime/device_executor.h): a
// launched step's chunks, the graph limit, or the end. A message is int32 words: a fixed
// header, then the payload (for a step: per chunk its fields, then its tokens, block table,
// snapshots and tree parents). The words travel between ranks over the group's communicator.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/step_view.h"

namespace peregrine {

enum class RankCommand : int32_t { kLaunch = 1, kEnableGraphs = 2, kStop = 3 };

// [command, payload words, argument, check]; check = a fixed tag xor the others (a follower
// that reads anything else has lost step with the leader).
inline constexpr int64_t kRankHeaderWords = 4;
using RankHeader = std::array<int32_t, kRankHeaderWords>;

RankHeader MakeRankHeader(RankCommand command, int64_t payload_words, int32_t argument);
// The command, or InvalidArgument when the header is malformed.
Status ReadRankHeader(const RankHeader& header, RankCommand* command, int64_t* payload_words, int32_t* argument);

// A step's chunks as words. Positions and lengths must fit int32 (InvalidArgument otherwise).
Result<std::vector<int32_t>> EncodeChunks(std::span<const ChunkView> chunks);

// Chunks decoded from words, owning what their views point into.
class DecodedChunks {
 public:
  static Result<DecodedChunks> Decode(std::span<const int32_t> words);
  DecodedChunks(DecodedChunks&&) = default;  // the views keep pointing into the moved words
  DecodedChunks& operator=(DecodedChunks&&) = default;
  DecodedChunks(const DecodedChunks&) = delete;
  DecodedChunks& operator=(const DecodedChunks&) = delete;
  std::span<const ChunkView> chunks() const { return views_; }

 private:
  DecodedChunks() = default;
  std::vector<int32_t> words_;
  std::vector<ChunkView> views_;
};

}  // namespace peregrine
