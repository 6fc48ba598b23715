// Builds the serving engine for `peregrine serve`: the model (a checkpoint directory or the
// embedded demo), its runner, KV bookkeeping sized from the options, and the step loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"

namespace peregrine::cli {

struct EngineOptions {
  std::string model_path;                 // empty: the embedded demo model
  int threads = 2;                        // CPU backend threads
  int64_t max_num_seqs = 256;             // running sequences per step
  int64_t max_num_batched_tokens = 2048;  // token budget per step
  int64_t max_num_waiting = 4096;         // bounded waiting queue
  int64_t kv_cache_tokens = 1 << 22;      // tokens of context the KV pools hold in total
  int32_t kv_page_size = 64;              // compressed entries per page
};

// A started engine (its step loop running), or why it could not be built.
Result<std::unique_ptr<Engine>> MakeEngine(const EngineOptions& options);

}  // namespace peregrine::cli
