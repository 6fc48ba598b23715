// Draft trees for speculative decoding (the host half, no model and no CUDA): DDTree's
// best-first construction from a drafter's per-position candidates under a node budget, the
// tree's verify layout (positions, ancestor mask), and the acceptance walk that turns the
// target's token at every node into the accepted tokens.
//
// Construction (Ringel & Romano, "Accelerating Speculative Decoding with Block Diffusion Draft
// Trees"): the drafter gives, for each depth d = 1..D after the last committed token, its K
// most likely tokens with logprobs. A node at depth d taking the rank-r token of depth d has
// path weight sum of its ancestors' logprobs plus its own. Nodes are taken best first (largest
// path weight; ties by the lexicographically smaller rank path) from a frontier that starts
// with the rank-0 token of depth 1; taking a node adds its next sibling (rank r + 1, same
// parent) and its first child (rank 0 at depth d + 1). Under the drafter's independence
// assumption the first B nodes taken are the B-node tree of largest expected accepted length.
// An MTP chain's per-step top-k (each step conditioned on the chain) gives candidates of the
// same shape.
//
// Acceptance: the target's token at each node (its argmax for greedy requests, or a token
// sampled from its distribution at that node) is computed for every node in the one verify
// forward. Walking from the root, the walk moves to the child holding the target's token and
// stops at a node with none; the accepted tokens are the path's and the target's token at the
// last node (the bonus). Every accepted token is the target's own choice at its context, so
// the output is the non-speculative one: identical for greedy requests, and for sampled ones
// too when the node at depth d samples with the draw non-speculative decoding would make for
// that token (the draws depend on the depth only; one node per depth lies on the path).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace peregrine::speculative {

// The drafter's candidates for one depth: tokens most likely first, with their logprobs.
struct DepthCandidates {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  // A block drafter's confidence head for this depth (in [0, 1]); 1 from drafters without one.
  float confidence = 1.0f;
};

// Node 0 is the root (the last committed token, or the token being sampled for it); nodes
// 1..n follow in the order they were taken, every node after its parent.
struct DraftTree {
  std::vector<int32_t> tokens;   // [n + 1]
  std::vector<int32_t> parents;  // [n + 1], -1 for the root
  std::vector<int32_t> depths;   // [n + 1], 0 for the root
  std::vector<int32_t> ranks;    // [n + 1], the token's rank among its depth's candidates (root 0)
  std::vector<double> weights;   // [n + 1], path logprob (root 0)

  int64_t num_nodes() const { return static_cast<int64_t>(tokens.size()); }
  int32_t max_depth() const;
  // Row i, column j: node j is node i or one of its ancestors (what node i attends to inside
  // the tree). [num_nodes, num_nodes], row-major.
  std::vector<uint8_t> AncestorMask() const;
  // Each node's position when the root sits at `root_position`.
  std::vector<int64_t> Positions(int64_t root_position) const;
};

// At most `node_budget` nodes besides the root, depth at most candidates.size(). Candidates
// per depth must be non-empty with as many logprobs as tokens, logprobs finite and not
// increasing (InvalidArgument otherwise). A budget of 0 gives the root alone.
Result<DraftTree> BuildDraftTree(int32_t root_token, std::span<const DepthCandidates> candidates,
                                 int64_t node_budget);

// A chain (one token per depth): the tree of an MTP drafter without branching.
DraftTree ChainTree(int32_t root_token, std::span<const int32_t> draft_tokens);

struct Acceptance {
  std::vector<int32_t> nodes;   // the accepted path's nodes after the root, in order
  std::vector<int32_t> tokens;  // their tokens, then the bonus token: nodes.size() + 1 of them
};

// target_tokens[i]: the target's token at node i (argmax or sampled). InvalidArgument when
// the sizes differ.
Result<Acceptance> Accept(const DraftTree& tree, std::span<const int32_t> target_tokens);

}  // namespace peregrine::speculative
