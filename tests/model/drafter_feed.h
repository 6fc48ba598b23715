// One chunk of a drafter test on the CPU model: tokens [pos, pos + len) of a sequence run in
// `slot` with every row's final hidden state kept, and the drafter's input over those rows
// (block_drafter_test, speculative_model_test).
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4::drafter_test {

struct DrafterFeed {
  std::vector<int32_t> rows;  // 0 .. len - 1, the chunk's rows (input.rows points here)
  DraftInput input;           // slot, position, rows, tokens and restart set; the caller sets the rest
};

// Runs the chunk through `model` and fills `feed`; `draft`: the input's tokens include the
// chunk's successor (tokens[pos + len]), which drafting past the chunk needs.
inline Status FeedDrafter(Model& model, HostKvPools& pools, std::span<const int32_t> blocks, int32_t slot,
                          std::span<const int32_t> tokens, int64_t pos, int64_t len, bool draft, DrafterFeed* feed) {
  ChunkView view;
  view.slot = slot;
  view.first_position = pos;
  view.num_tokens = len;
  view.tokens = tokens.subspan(static_cast<size_t>(pos), static_cast<size_t>(len));
  view.blocks = blocks;
  view.keep_hidden = true;
  std::vector<float> logits;
  PG_RETURN_IF_ERROR(model.Forward(std::vector<ChunkView>{view}, pools, &logits));
  feed->rows.resize(static_cast<size_t>(len));
  std::iota(feed->rows.begin(), feed->rows.end(), 0);
  feed->input = DraftInput{};
  feed->input.slot = slot;
  feed->input.first_position = pos;
  feed->input.rows = feed->rows;
  feed->input.tokens = tokens.subspan(static_cast<size_t>(pos), static_cast<size_t>(len + (draft ? 1 : 0)));
  feed->input.restart = pos == 0;
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4::drafter_test
