// Per-request sampling parameters, validated once at the edge (the server) and passed down.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"

namespace peregrine {

// Processing order in Sample(): logit_bias, the min_tokens ban, repetition penalty, presence/frequency penalties,
// temperature, then top-k, top-p and min-p (all three only truncate the distribution).
struct SamplingParams {
  float temperature = 1.0f;         // [0, 2] (OpenAI's range); 0 selects greedy decoding
  int32_t top_k = 0;                // 0 or -1: disabled; >= vocab behaves as disabled
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI semantics (generated tokens)
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI semantics (generated tokens)
  float repetition_penalty = 1.0f;  // (0, 2], HF/vLLM semantics (prompt and generated tokens)
  std::vector<std::pair<int32_t, float>> logit_bias;  // token -> bias in [-100, 100], ids unique
  // Per-request; output independent of the batch. For n > 1 / best_of the server submits one
  // request per choice and gives choice i the seed `seed + i` (wrapping), so a seeded request
  // reproduces every choice; unseeded choices each draw their own random seed.
  std::optional<uint64_t> seed;
  int32_t logprobs = -1;            // -1: none; k >= 0: chosen token's logprob + top-k alternatives
  // vLLM's min_tokens: until this many tokens are generated, min_tokens_stop_ids are banned
  // (-inf after logit_bias; raw logprobs are unaffected). The engine fills the ids: the
  // model's EOS (unless ignore_eos) and the request's stop token ids.
  int32_t min_tokens = 0;           // >= 0
  std::vector<int32_t> min_tokens_stop_ids;

  bool is_greedy() const { return temperature == 0.0f; }
};

// Limits the server enforces (robustness rows 7, 13, 14).
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxLogitBiasEntries = 1024;
inline constexpr float kMaxTemperature = 2.0f;
inline constexpr float kMaxAbsPenalty = 2.0f;          // presence and frequency
inline constexpr float kMaxRepetitionPenalty = 2.0f;
inline constexpr float kMaxAbsLogitBias = 100.0f;

// InvalidArgument with a fixed message naming the parameter (never echoing user bytes).
// Rejects NaN and +-inf in every float field, each value outside the ranges above, a
// logit_bias key outside [0, vocab_size), a repeated key, more than kMaxLogitBiasEntries
// entries, and logprobs outside [-1, kMaxTopLogprobs]. A non-positive vocab_size is the
// caller's bug and is rejected too. Pure function of its arguments.
Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

}  // namespace peregrine
