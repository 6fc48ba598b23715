// The sparse processors that Sample() applies in place before choosing a token: logit_bias,
// the repetition penalty and the presence/frequency penalties. Each touches only the tokens it
// names, so its cost is independent of the vocabulary size.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace peregrine {

// A logit as it was before a processor changed it (to report raw logprobs afterwards).
struct SavedLogit {
  int32_t token = 0;
  float logit = 0.0f;
};

// Every function below skips token ids outside [0, logits.size()) and, when `saved` is not
// null, appends each touched token's value before the change (a token may appear more than
// once; its first entry is the oldest value).

// logits[token] = -inf for each token (min_tokens keeps EOS and stop ids out this way).
void BanTokens(std::span<float> logits, std::span<const int32_t> tokens, std::vector<SavedLogit>* saved);

// logits[token] += bias. A bias of -100 makes a token practically unreachable, +100 makes it
// practically certain (OpenAI semantics); nothing is clamped.
void ApplyLogitBias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias,
                    std::vector<SavedLogit>* saved);

// HF/vLLM: each token seen in the prompt or the output, once however often it was seen,
// has a positive logit divided by `penalty` and a negative one multiplied by it.
// No-op when penalty == 1.
void ApplyRepetitionPenalty(std::span<float> logits, float penalty,
                            const std::unordered_map<int32_t, int32_t>& prompt_counts,
                            const std::unordered_map<int32_t, int32_t>& generated_counts,
                            std::vector<SavedLogit>* saved);

// OpenAI: logits[t] -= presence * (count[t] > 0) + frequency * count[t] over generated tokens.
// No-op when both are 0.
void ApplyPresenceFrequencyPenalties(std::span<float> logits, float presence, float frequency,
                                     const std::unordered_map<int32_t, int32_t>& generated_counts,
                                     std::vector<SavedLogit>* saved);

}  // namespace peregrine
