// Prompt logprobs on the host (RunnerScoring): the CPU runner's scoring, and the CUDA runner's
// when it samples on the host.
#pragma once

#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/model_runner.h"

namespace peregrine {

// `logits` holds the step's rows, chunk after chunk (ChunkView::logit_rows each); appends one
// ChunkScores per chunk with scoring targets, each row as ScoreToken gives it. Internal when a
// chunk's targets have no row each (or it lacks all_logits), a target is outside the
// vocabulary, or the rows do not add up to `logits`. `views` (one per chunk, or empty: the
// chunks' own) are the views the step ran, where the runner changed them (verify trees).
Status ScoreOnHost(std::span<const RunnerChunk> chunks, std::span<const float> logits, int64_t vocab,
                   std::vector<ChunkScores>* scores, std::span<const ChunkView> views = {});

}  // namespace peregrine
