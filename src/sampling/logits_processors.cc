// Sparse in-place logits processors; see logits_processors.h for the semantics.
#include "sampling/logits_processors.h"

#include <limits>

namespace peregrine {
namespace {

bool IsInVocab(int32_t token, std::span<float> logits) {
  return token >= 0 && static_cast<size_t>(token) < logits.size();
}

void Save(std::vector<SavedLogit>* saved, int32_t token, float logit) {
  if (saved != nullptr) saved->push_back({token, logit});
}

float RepetitionPenalized(float logit, float penalty) {
  return logit > 0.0f ? logit / penalty : logit * penalty;
}

}  // namespace

void BanTokens(std::span<float> logits, std::span<const int32_t> tokens, std::vector<SavedLogit>* saved) {
  for (int32_t token : tokens) {
    if (!IsInVocab(token, logits)) continue;
    Save(saved, token, logits[token]);
    logits[token] = -std::numeric_limits<float>::infinity();
  }
}

void ApplyLogitBias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias,
                    std::vector<SavedLogit>* saved) {
  for (const auto& [token, value] : bias) {
    if (!IsInVocab(token, logits)) continue;
    Save(saved, token, logits[token]);
    logits[token] += value;
  }
}

void ApplyRepetitionPenalty(std::span<float> logits, float penalty,
                            const std::unordered_map<int32_t, int32_t>& prompt_counts,
                            const std::unordered_map<int32_t, int32_t>& generated_counts,
                            std::vector<SavedLogit>* saved) {
  if (penalty == 1.0f) return;
  for (const auto& [token, count] : prompt_counts) {
    if (count <= 0 || !IsInVocab(token, logits)) continue;
    Save(saved, token, logits[token]);
    logits[token] = RepetitionPenalized(logits[token], penalty);
  }
  // A token in both maps is penalised once: the prompt loop above already did it.
  for (const auto& [token, count] : generated_counts) {
    if (count <= 0 || !IsInVocab(token, logits)) continue;
    const auto in_prompt = prompt_counts.find(token);
    if (in_prompt != prompt_counts.end() && in_prompt->second > 0) continue;
    Save(saved, token, logits[token]);
    logits[token] = RepetitionPenalized(logits[token], penalty);
  }
}

void ApplyPresenceFrequencyPenalties(std::span<float> logits, float presence, float frequency,
                                     const std::unordered_map<int32_t, int32_t>& generated_counts,
                                     std::vector<SavedLogit>* saved) {
  if (presence == 0.0f && frequency == 0.0f) return;
  for (const auto& [token, count] : generated_counts) {
    if (count <= 0 || !IsInVocab(token, logits)) continue;
    Save(saved, token, logits[token]);
    const double amount = presence + static_cast<double>(frequency) * count;
    logits[token] = static_cast<float>(logits[token] - amount);
  }
}

}  // namespace peregrine
