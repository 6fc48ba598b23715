#include "speculative/speculative_config.h"

namespace peregrine::speculative {

int32_t SpeculativeConfig::max_nodes() const {
  if (!enabled()) return 0;
  return num_draft_tokens > 0 ? num_draft_tokens - 1 : num_steps;
}

Result<Algorithm> ParseAlgorithm(std::string_view name) {
  if (name.empty() || name == "none") return Algorithm::kNone;
  if (name == "mtp" || name == "MTP" || name == "nextn" || name == "NEXTN" || name == "eagle" || name == "EAGLE")
    return Algorithm::kMtp;
  if (name == "ddtree" || name == "DDTREE") return Algorithm::kDdtree;
  if (name == "ngram" || name == "NGRAM") return Algorithm::kNgram;
  return InvalidArgument("unknown speculative algorithm '" + std::string(name) + "' (mtp, ddtree, ngram or none)");
}

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kNone: return "none";
    case Algorithm::kMtp: return "mtp";
    case Algorithm::kDdtree: return "ddtree";
    case Algorithm::kNgram: return "ngram";
  }
  return "none";
}

Status Validate(const SpeculativeConfig& c) {
  if (!c.enabled()) return Status::Ok();
  if (c.num_steps < 1 || c.num_steps > kMaxSpeculativeSteps)
    return InvalidArgument("--speculative-num-steps must be in [1, " + std::to_string(kMaxSpeculativeSteps) + "]");
  if (c.topk < 1 || c.topk > 16) return InvalidArgument("--speculative-eagle-topk must be in [1, 16]");
  const int32_t nodes = c.max_nodes();
  if (nodes < c.num_steps || nodes > kMaxSpeculativeNodes)
    return InvalidArgument("--speculative-num-draft-tokens must be in [num_steps + 1, " +
                           std::to_string(kMaxSpeculativeNodes + 1) + "]");
  if ((c.algorithm == Algorithm::kMtp || c.algorithm == Algorithm::kNgram) && nodes != c.num_steps)
    return InvalidArgument("a draft chain verifies num_steps + 1 tokens: --speculative-num-draft-tokens must be " +
                           std::to_string(c.num_steps + 1) + " (use --speculative-algorithm ddtree for trees)");
  if (c.algorithm == Algorithm::kNgram &&
      (c.ngram.min_match < 1 || c.ngram.max_match < c.ngram.min_match || c.ngram.max_match > 64))
    return InvalidArgument(
        "--speculative-ngram-min-match-window-size and --speculative-ngram-max-match-window-size must satisfy "
        "1 <= min <= max <= 64");
  return Status::Ok();
}

}  // namespace peregrine::speculative
