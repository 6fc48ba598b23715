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
  const std::unordered_map<int32_t, int32_t>& prompt_counts() const { return prompt_counts_; }
  // Seeded from params.seed when given, else from a nondeterministic source.
  std::mt19937_64& rng() { return rng_; }

 private:
  std::unordered_map<int32_t, int32_t> generated_counts_;
  std::unordered_map<int32_t, int32_t> prompt_counts_;
  std::mt19937_64 rng_;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;                     // of the chosen token under the processed distribution
  std::vector<TokenLogprob> top_logprobs;   // params.logprobs entries, most likely first
};

// Samples one token from `logits` [vocab] (modified in place by the processors:
// logit_bias, penalties, temperature, top-k, top-p, min-p), records it in `state`.
// Logprobs are the log-softmax of the raw model logits, before any processor (vLLM's
// default "raw_logprobs" semantics), so they do not depend on the sampling settings.
SampleResult Sample(std::span<float> logits, const SamplingParams& params, SequenceSamplingState& state);

}  // namespace peregrine
