// Per-request sampling parameters, validated once at the edge (the server) and passed down.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"

namespace peregrine {

struct SamplingParams {
  float temperature = 1.0f;         // 0 selects greedy decoding
  int32_t top_k = 0;                // 0 or -1: disabled
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI semantics (generated tokens)
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI semantics (generated tokens)
  float repetition_penalty = 1.0f;  // (0, 2], HF/vLLM semantics (prompt and generated tokens)
  std::vector<std::pair<int32_t, float>> logit_bias;  // token -> bias in [-100, 100]
  std::optional<uint64_t> seed;     // per-request; output independent of the batch
  int32_t logprobs = -1;            // -1: none; k >= 0: chosen token's logprob + top-k alternatives

  bool is_greedy() const { return temperature == 0.0f; }
};

// Limits the server enforces (robustness rows 7, 13, 14).
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxLogitBiasEntries = 1024;

// InvalidArgument with a fixed message naming the parameter (never echoing user bytes).
Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

}  // namespace peregrine
