// A drafter's candidates per row: the K most likely tokens of a row of logits and their
// log-probabilities (log-softmax of the raw logits), in one launch. The speculative drafter
// needs these per depth (DDTree builds its tree from them; a chain takes the first); the
// sampling kernel's top-logprobs path gives the same set with host-exact normalizers, at a
// cost of several passes over the row on one CTA.
//
// Order: larger logit first, then lower id (the host's MoreLikely); NaN counts as -inf. The
// normalizer is a float sum (split over the CTAs of a row), not the host's double sum: the
// log-probabilities agree with raw_logprobs.cc to ~1e-5, not bit for bit. Drafts only shape
// the tree; verification decides the tokens.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kDraftMaxCandidates = 16;  // --speculative-eagle-topk's limit

struct DraftCandidatesParams {
  const float* logits = nullptr;   // [B, V]
  const float* bias = nullptr;     // optional [B, V] added to the logits first (a float add: the
                                   // block drafter's Markov term); log-probabilities are of the sums
  int32_t* tokens = nullptr;       // [B] out: the most likely token of each row
  int32_t* top_tokens = nullptr;   // out: row b's K tokens at top_tokens[b * top_pitch + i]; may be null
  float* top_logprobs = nullptr;   // out: their log-probabilities (-inf where the row has fewer)
  int64_t top_pitch = 0;           // elements between rows of top_tokens / top_logprobs
  int64_t batch = 0;
  int32_t vocab = 0;
  int32_t k = 1;                   // 1..kDraftMaxCandidates
  bool one_cta_per_row = false;    // no cluster even on sm_90 (tests of the other form)
};

// Capture-safe; the grid depends on B alone. On sm_90 each row is split over a cluster of CTAs.
cudaError_t LaunchDraftCandidates(const DraftCandidatesParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
