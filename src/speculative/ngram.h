// The n-gram drafter (prompt lookup; vLLM's "ngram", SGLang's NGRAM): proposes the tokens
// that followed the latest earlier occurrence of the sequence's last n tokens. It reads the
// sequence's own tokens (prompt and output) and no model, so it drafts on any backend and
// pays off where output repeats its context (code edits, retrieval, structured rewrites).
// Host only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace peregrine::speculative {

struct NgramOptions {
  int32_t min_match = 1;   // shortest suffix that may match (--speculative-ngram-min-match-window-size)
  int32_t max_match = 12;  // longest suffix tried (--speculative-ngram-max-match-window-size)
  // Occurrences are searched among the last this many tokens only: the scan runs on the host
  // for every speculating row of every step, so at long contexts its cost is bounded.
  int64_t max_search_tokens = 16384;
};

// Up to `num_tokens` draft tokens after `history` (its last token is the newest): the
// continuation of the latest earlier occurrence of history's longest suffix of length in
// [min_match, max_match] that occurs earlier (the latest occurrence among those of the
// longest length). Empty when no suffix of min_match tokens occurs earlier, or when
// num_tokens <= 0. One backward scan over the last max_search_tokens positions, stopping at
// the first occurrence of max_match tokens.
std::vector<int32_t> NgramDraft(std::span<const int32_t> history, const NgramOptions& options, int32_t num_tokens);

// The draft chain after a verify row's root token (the newest, at root_position): `history`
// holds positions [0, root_position] or [0, root_position) (the root is then appended to a
// copy). Empty when history reaches less far.
std::vector<int32_t> NgramChainAfter(std::span<const int32_t> history, int64_t root_position, int32_t root_token,
                                     const NgramOptions& options, int32_t num_tokens);

}  // namespace peregrine::speculative
