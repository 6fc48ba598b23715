// Sequence: the engine's record of one request (host only).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "scheduler/engine_request.h"
#include "sampling/sampler.h"
#include "structured/grammar_engine.h"

namespace peregrine {

struct Sequence {
  int64_t id = 0;                    // engine-internal, never reused
  EngineRequest request;
  EventSink sink;
  std::vector<int32_t> tokens;       // prompt followed by the generated tokens known on the host
  int64_t num_prompt_tokens = 0;
  int64_t num_computed = 0;          // tokens whose state the runner holds (or a launched step computes)
  int64_t num_generated = 0;
  int64_t num_preemptions = 0;
  int64_t num_cached_tokens = -1;    // prompt tokens found in the prefix cache at first admission
  std::unique_ptr<SequenceSamplingState> sampling;
  // Structured outputs: the request's grammar over the generated tokens the host knows;
  // active once grammar_after was generated (or from the start without one).
  std::unique_ptr<structured::GrammarMatcher> matcher;
  bool grammar_active = false;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point first_scheduled;  // the epoch until a step first takes it
  // Overlapped steps (engine.h): a launched step is still sampling the sequence's next token
  // (at most one at a time), which its slot's next chunk reads on the device.
  int64_t num_pending = 0;
  // Speculative decoding follows this sequence (the engine speculates and it has no grammar).
  bool speculates = false;
  // The last event went out, but a launched step may still name the sequence.
  bool finished = false;
  // Prompt logprobs (request.prompt_logprobs >= 0): the prompt positions a launched step has
  // scored (position p scores token p + 1), and the scores collected so far, in order, until
  // the request's first event carries them.
  int64_t num_scored_launched = 0;
  std::vector<SampleResult> prompt_scores;
  bool prompt_scores_sent = false;
  // Disaggregation (request.export_kv): the first generated token, exported with the KV.
  SampleResult first_sample;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()) + num_pending; }
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
  // Prompt positions whose successor is scored: all but the last (0 without prompt logprobs).
  int64_t num_prompt_scores() const { return request.prompt_logprobs >= 0 ? num_prompt_tokens - 1 : 0; }
  // A chunk starting at `first` scores rows (its positions below num_prompt_scores()).
  bool scores_from(int64_t first) const {
    return num_scored_launched < num_prompt_scores() && first < num_prompt_scores();
  }
};

}  // namespace peregrine
