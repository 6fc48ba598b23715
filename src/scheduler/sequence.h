// Sequence: the engine's record of one request (host only).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine_client.h"
#include "sampling/sampler.h"

namespace peregrine {

struct Sequence {
  int64_t id = 0;                    // engine-internal, never reused
  EngineRequest request;
  EventSink sink;
  std::vector<int32_t> tokens;       // prompt followed by generated tokens
  int64_t num_prompt_tokens = 0;
  int64_t num_computed = 0;          // tokens whose state the runner holds
  int64_t num_generated = 0;
  int64_t num_preemptions = 0;
  std::unique_ptr<SequenceSamplingState> sampling;
  std::chrono::steady_clock::time_point arrival;
  // Overlapped steps (engine.h): the last num_pending tokens are placeholders for tokens that
  // launched steps are still sampling (at most one when a step is planned); pending_row is the
  // newest one's sampling row in its step. `finished`: the last event went out, but a
  // launched step may still name the sequence.
  int64_t num_pending = 0;
  int32_t pending_row = -1;
  bool finished = false;

  int64_t num_uncomputed() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
};

}  // namespace peregrine
