// Logits -> tokens on the host. Each row is sampled from its own logits, parameters and
// per-request state only, so a request's tokens never depend on the rest of the batch
// (deterministic mode holds by construction when the logits are batch-invariant).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "sampling/sampling_params.h"

namespace peregrine {

// What sampling needs to remember about one request between steps.
class SequenceSamplingState {
 public:
  SequenceSamplingState(const SamplingParams& params, std::span<const int32_t> prompt_ids);

  // Records a generated token (penalties count generated tokens; repetition also the prompt).
  void Append(int32_t token);

  const std::unordered_map<int32_t, int32_t>& generated_counts() const { return generated_counts_; }
  int64_t num_generated() const { return num_generated_; }
  // Filled only when params.repetition_penalty != 1, its only reader (a long prompt is not
  // counted for nothing); empty otherwise.
  const std::unordered_map<int32_t, int32_t>& prompt_counts() const { return prompt_counts_; }
  // Seeded from params.seed when given, else from a nondeterministic source.
  std::mt19937_64& rng() { return rng_; }
  // The seed rng() started from (params.seed, or the random one drawn for this request).
  uint64_t seed() const { return seed_; }

 private:
  std::unordered_map<int32_t, int32_t> generated_counts_;
  std::unordered_map<int32_t, int32_t> prompt_counts_;
  int64_t num_generated_ = 0;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  // Of the chosen token under the raw model distribution (log-softmax of the logits before any
  // processor); 0 when params.logprobs is -1.
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;   // params.logprobs entries, most likely first
  // Prompt logprobs only (ScoreToken): 1 + the number of tokens with a larger raw logit
  // (vLLM's rank: tied tokens share one); 0 where it was not computed.
  int64_t rank = 0;
};

// Samples one token from `logits` [vocab] and records it in `state` (Append).
// `logits` is scratch: logit_bias and the penalties are applied to it in place and its contents
// after the call are unspecified; temperature, top-k, top-p and min-p never write to it.
// Logprobs are the log-softmax of the raw model logits, before any processor (vLLM's
// default "raw_logprobs" semantics), so they do not depend on the sampling settings;
// alternatives are ordered by logprob, ties by lower token id.
//
// Greedy (temperature 0) takes the argmax of the processed logits, ties to the lowest id, and
// draws nothing from the RNG. Any other setting draws exactly one 64-bit value, maps it to a
// double u in [0, 1) and walks the CDF of the kept tokens in ascending id order, so a seed gives
// the same tokens on every platform for the same probabilities. Top-k keeps every token tied with
// the k-th largest logit (as HF and vLLM do); top-p keeps the smallest most-likely-first prefix
// whose mass reaches top_p (ties by lower id); min-p keeps tokens with p >= min_p * p_max.
//
// Non-finite logits (a model fault, not bad input): NaN is never chosen; if every logit is NaN
// or -inf the result is still a token id in [0, vocab) and never undefined behaviour.
// Token ids in `state` or params.logit_bias outside [0, vocab) are ignored (validated upstream).
// Cannot fail; `logits` must not be empty (checked).
SampleResult Sample(std::span<float> logits, const SamplingParams& params, SequenceSamplingState& state);

// The RNG draws Sample() makes per token under `params` (none when greedy).
inline int DrawsPerToken(const SamplingParams& params) { return params.temperature > 0.0f ? 1 : 0; }

// A known token under `logits` (prompt logprobs): its raw logprob, its rank and the num_top
// most likely tokens, as Sample() reports logprobs. NaN logits count as -inf (so a NaN token
// ranks after every finite one). Cannot fail; `logits` must not be empty and `token` must be
// in range (checked).
SampleResult ScoreToken(std::span<const float> logits, int32_t token, int32_t num_top);

}  // namespace peregrine
