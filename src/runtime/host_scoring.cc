#include "runtime/host_scoring.h"

namespace peregrine {

Status ScoreOnHost(std::span<const RunnerChunk> chunks, std::span<const float> logits, int64_t vocab,
                   std::vector<ChunkScores>* scores, std::span<const ChunkView> views) {
  const auto v = static_cast<size_t>(vocab);
  if (!views.empty() && views.size() != chunks.size()) return Internal("one view per chunk expected");
  size_t first_row = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const RunnerChunk& chunk = chunks[c];
    const ChunkView& view = views.empty() ? chunk.view : views[c];
    const auto rows = static_cast<size_t>(view.logit_rows());
    const std::span<const int32_t> targets = chunk.scoring.targets;
    if (!targets.empty()) {
      if (!view.all_logits || targets.size() > rows - (view.needs_logits ? 1 : 0))
        return Internal("scoring targets without a logits row each");
      if ((first_row + targets.size()) * v > logits.size()) return Internal("a scored row outside the step's logits");
      ChunkScores& out = scores->emplace_back();
      for (size_t i = 0; i < targets.size(); ++i) {
        if (targets[i] < 0 || targets[i] >= vocab) return Internal("a scoring target outside the vocabulary");
        out.push_back(ScoreToken(logits.subspan((first_row + i) * v, v), targets[i], chunk.scoring.num_top));
      }
    }
    first_row += rows;
  }
  if (first_row * v != logits.size()) return Internal("unexpected logits rows from the step");
  return Status::Ok();
}

}  // namespace peregrine
