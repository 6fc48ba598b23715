// How a server speculates (SGLang's and vLLM's flags): which drafter, how deep, how many
// verify nodes per step. Host only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "speculative/ngram.h"

namespace peregrine::speculative {

enum class Algorithm : uint8_t {
  kNone,
  kMtp,     // the checkpoint's MTP layer chained num_steps deep: one draft token per depth
  kDdtree,  // DDTree: a best-first tree over the MTP chain's top-k per depth under a node budget
  kNgram,   // prompt lookup (ngram.h): a chain copied from the sequence's own earlier tokens, no model
};

struct SpeculativeConfig {
  Algorithm algorithm = Algorithm::kNone;
  int32_t num_steps = 3;         // draft depth (--speculative-num-steps)
  // Tokens verified per step, the root (the newest token) included (--speculative-num-draft-tokens);
  // 0: num_steps + 1 (a chain).
  int32_t num_draft_tokens = 0;
  int32_t topk = 4;              // candidates per depth for trees (--speculative-eagle-topk)
  NgramOptions ngram;            // ngram: the suffix lengths it matches

  bool enabled() const { return algorithm != Algorithm::kNone; }
  // Draft positions after a row's token that a verify step may accept (0 when off).
  int32_t lookahead() const { return enabled() ? num_steps : 0; }
  // Verify nodes besides the root.
  int32_t max_nodes() const;
  // Candidates per depth the drafter returns.
  int32_t candidates() const { return algorithm == Algorithm::kDdtree ? topk : 1; }
  // Whether the drafter is a model's (MTP layers, a block drafter) rather than the n-gram lookup.
  bool needs_model_drafter() const { return algorithm == Algorithm::kMtp || algorithm == Algorithm::kDdtree; }
};

// "mtp" (SGLang's NEXTN/EAGLE names too: "nextn", "eagle"), "ddtree", "ngram", "none"/"".
Result<Algorithm> ParseAlgorithm(std::string_view name);
std::string_view AlgorithmName(Algorithm algorithm);
// InvalidArgument unless 1 <= num_steps <= kMaxSpeculativeSteps, the node budget is at least
// num_steps (so the chain fits) and at most kMaxSpeculativeNodes, 1 <= topk <= 16, and a
// chain's node budget is its depth (MTP, ngram), and for ngram 1 <= min match <= max match <= 64.
Status Validate(const SpeculativeConfig& config);

inline constexpr int32_t kMaxSpeculativeSteps = 16;
inline constexpr int32_t kMaxSpeculativeNodes = 64;

}  // namespace peregrine::speculative
