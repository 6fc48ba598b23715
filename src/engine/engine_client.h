// The engine as the serving front end sees it: submit token-level generation requests,
// receive their events, abort them. Thread-safe; implemented by Engine (engine.h) and by
// fakes in the server's tests.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "scheduler/engine_request.h"

namespace peregrine {

// Upper bounds of the tokens-per-step histogram (vLLM's iteration_tokens_total buckets).
inline constexpr int64_t kStepTokenBounds[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
inline constexpr size_t kNumStepTokenBounds = std::size(kStepTokenBounds);

// Tokens per launched step (prefill chunks and decode rows together), cumulative.
struct StepTokenCounts {
  std::array<int64_t, kNumStepTokenBounds + 1> buckets{};  // not cumulative; the last is above every bound
  int64_t sum = 0;
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_usage = 0.0;               // fraction of KV pages in use
  int64_t kv_capacity_tokens = 0;      // tokens that fit at the configured context length
  int64_t num_preemptions = 0;         // cumulative
  int64_t kv_imports_failed = 0;       // cumulative: transferred KV that did not load (disaggregation)
  int64_t kv_imports_recomputed = 0;   // of them, requests that computed their prompt instead
  int64_t prefix_cache_queries = 0;    // cumulative tokens looked up
  int64_t prefix_cache_hits = 0;       // cumulative tokens found
  int64_t kv_num_blocks = 0;           // KV blocks of the pools
  int64_t kv_block_tokens = 0;         // tokens per block
  int64_t kv_num_snapshots = 0;        // prefix-cache snapshots of the pools (0: no prefix caching)
  int64_t kv_pool_bytes = 0;           // bytes of every KV pool (blocks, per-request state, snapshots)
  std::string kv_cache_dtype = "bfloat16";  // the cache's format (EngineConfig::kv_cache_dtype)
  double device_busy_seconds = 0.0;    // cumulative device time of steps (runners that time it)
  double device_idle_seconds = 0.0;    // cumulative device idle time between steps of a busy engine
  double device_draft_seconds = 0.0;   // cumulative device time of speculative work between steps
  // Cumulative host time inside the runner's launch, collect and drafting (RunnerHostTime).
  double runner_launch_seconds = 0.0;
  double runner_collect_seconds = 0.0;
  double runner_draft_seconds = 0.0;
  StepTokenCounts step_tokens;
  // Speculative decoding, cumulative (vLLM's spec_decode counters): verify steps of a row,
  // draft tokens proposed and accepted, and accepted per draft position (index k: position k + 1).
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  int32_t spec_lookahead = 0;  // draft positions per verify (0: no speculation)
  bool is_ready = false;
  // Non-empty once the engine cannot run any more (its model's group of ranks broke): it is
  // not ready, every request it held ended with an error, and it refuses new ones.
  std::string fatal_error;
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Queues the request. ResourceExhausted when the waiting queue is full (the server maps it
  // to 429 with Retry-After); InvalidArgument when the request can never be served (prompt +
  // max_tokens beyond the context, or more KV than the whole pool), with a fixed message.
  // On success every later outcome arrives through `sink`, ending with a `finish` event.
  virtual Status Submit(EngineRequest request, EventSink sink) = 0;
  // Ends the request within one step (frees its KV); its sink gets a kAbort finish unless it
  // already finished. Unknown ids are ignored.
  virtual void Abort(const std::string& request_id) = 0;
  virtual EngineStats Stats() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;
  // The model's end-of-sequence ids (a grammar's stop tokens).
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // The layout of the KV this engine exports and imports (TransferredKv::fingerprint); empty
  // when it cannot.
  virtual std::string kv_fingerprint() const { return {}; }
};

}  // namespace peregrine
