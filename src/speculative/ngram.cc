#include "speculative/ngram.h"

#include <algorithm>

namespace peregrine::speculative {

std::vector<int32_t> NgramDraft(std::span<const int32_t> history, const NgramOptions& options, int32_t num_tokens) {
  const auto len = static_cast<int64_t>(history.size());
  const int64_t min_match = std::max<int32_t>(options.min_match, 1);
  const int64_t max_match = std::max<int64_t>(options.max_match, min_match);
  if (num_tokens <= 0 || len < min_match + 1) return {};
  // Candidate j: an occurrence ending at j - 1 (continuation from j), j < len, compared with
  // the suffix backwards from its last token.
  int64_t best_start = -1, best_length = 0;
  const int64_t lowest = std::max<int64_t>(min_match, len - std::max<int64_t>(options.max_search_tokens, 1));
  for (int64_t j = len - 1; j >= lowest; --j) {
    int64_t m = 0;
    while (m < max_match && m < j && history[static_cast<size_t>(j - 1 - m)] == history[static_cast<size_t>(len - 1 - m)])
      ++m;
    if (m >= min_match && m > best_length) {
      best_length = m;
      best_start = j;
      if (m == max_match) break;
    }
  }
  if (best_start < 0) return {};
  const int64_t count = std::min<int64_t>(num_tokens, len - best_start);
  return {history.begin() + best_start, history.begin() + best_start + count};
}

std::vector<int32_t> NgramChainAfter(std::span<const int32_t> history, int64_t root_position, int32_t root_token,
                                     const NgramOptions& options, int32_t num_tokens) {
  const auto known = static_cast<int64_t>(history.size());
  if (known == root_position + 1) return NgramDraft(history, options, num_tokens);
  if (known != root_position) return {};
  std::vector<int32_t> whole(history.begin(), history.end());
  whole.push_back(root_token);
  return NgramDraft(whole, options, num_tokens);
}

}  // namespace peregrine::speculative
