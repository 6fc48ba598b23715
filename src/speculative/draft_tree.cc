#include "speculative/draft_tree.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <string>

namespace peregrine::speculative {

namespace {

// A frontier entry: the node it would become.
struct Candidate {
  double weight = 0.0;
  std::vector<int32_t> rank_path;  // ranks from depth 1, for ties
  int32_t parent = 0;
  int32_t depth = 1;
  int32_t rank = 0;
};

struct Worse {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.weight != b.weight) return a.weight < b.weight;
    return a.rank_path > b.rank_path;  // the smaller rank path first
  }
};

DraftTree RootOnly(int32_t root_token) {
  DraftTree tree;
  tree.tokens = {root_token};
  tree.parents = {-1};
  tree.depths = {0};
  tree.ranks = {0};
  tree.weights = {0.0};
  return tree;
}

}  // namespace

int32_t DraftTree::max_depth() const {
  return depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
}

std::vector<uint8_t> DraftTree::AncestorMask() const {
  const auto n = static_cast<size_t>(num_nodes());
  std::vector<uint8_t> mask(n * n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int32_t j = static_cast<int32_t>(i); j >= 0; j = parents[static_cast<size_t>(j)]) mask[i * n + static_cast<size_t>(j)] = 1;
  return mask;
}

std::vector<int64_t> DraftTree::Positions(int64_t root_position) const {
  std::vector<int64_t> out;
  out.reserve(depths.size());
  for (int32_t d : depths) out.push_back(root_position + d);
  return out;
}

Result<DraftTree> BuildDraftTree(int32_t root_token, std::span<const DepthCandidates> candidates,
                                 int64_t node_budget) {
  if (node_budget < 0) return InvalidArgument("the node budget must not be negative");
  for (size_t d = 0; d < candidates.size(); ++d) {
    const DepthCandidates& c = candidates[d];
    if (c.tokens.empty() || c.tokens.size() != c.logprobs.size())
      return InvalidArgument("depth " + std::to_string(d + 1) + ": candidates need as many logprobs as tokens");
    for (size_t k = 0; k < c.logprobs.size(); ++k) {
      if (!std::isfinite(c.logprobs[k]) || (k > 0 && c.logprobs[k] > c.logprobs[k - 1]))
        return InvalidArgument("depth " + std::to_string(d + 1) + ": logprobs must be finite, most likely first");
    }
  }
  DraftTree tree = RootOnly(root_token);
  if (candidates.empty() || node_budget == 0) return tree;

  std::priority_queue<Candidate, std::vector<Candidate>, Worse> frontier;
  frontier.push({candidates[0].logprobs[0], {0}, 0, 1, 0});
  while (!frontier.empty() && tree.num_nodes() <= node_budget) {
    Candidate c = frontier.top();
    frontier.pop();
    const auto node = static_cast<int32_t>(tree.num_nodes());
    const DepthCandidates& at = candidates[static_cast<size_t>(c.depth - 1)];
    tree.tokens.push_back(at.tokens[static_cast<size_t>(c.rank)]);
    tree.parents.push_back(c.parent);
    tree.depths.push_back(c.depth);
    tree.ranks.push_back(c.rank);
    tree.weights.push_back(c.weight);
    if (static_cast<size_t>(c.rank) + 1 < at.tokens.size()) {
      // The next sibling: the same parent, the next rank at this depth.
      Candidate s = c;
      s.rank = c.rank + 1;
      s.rank_path.back() = s.rank;
      s.weight = c.weight - at.logprobs[static_cast<size_t>(c.rank)] + at.logprobs[static_cast<size_t>(s.rank)];
      frontier.push(std::move(s));
    }
    if (static_cast<size_t>(c.depth) < candidates.size()) {
      // The first child: rank 0 at the next depth.
      Candidate child;
      child.parent = node;
      child.depth = c.depth + 1;
      child.rank = 0;
      child.rank_path = c.rank_path;
      child.rank_path.push_back(0);
      child.weight = c.weight + candidates[static_cast<size_t>(c.depth)].logprobs[0];
      frontier.push(std::move(child));
    }
  }
  return tree;
}

DraftTree ChainTree(int32_t root_token, std::span<const int32_t> draft_tokens) {
  DraftTree tree = RootOnly(root_token);
  for (size_t i = 0; i < draft_tokens.size(); ++i) {
    tree.tokens.push_back(draft_tokens[i]);
    tree.parents.push_back(static_cast<int32_t>(i));
    tree.depths.push_back(static_cast<int32_t>(i) + 1);
    tree.ranks.push_back(0);
    tree.weights.push_back(0.0);
  }
  return tree;
}

Result<Acceptance> Accept(const DraftTree& tree, std::span<const int32_t> target_tokens) {
  if (static_cast<int64_t>(target_tokens.size()) != tree.num_nodes())
    return InvalidArgument("one target token per tree node expected");
  // Children in node order (a node's children were taken best first).
  std::vector<std::vector<int32_t>> children(static_cast<size_t>(tree.num_nodes()));
  for (int32_t i = 1; i < tree.num_nodes(); ++i) children[static_cast<size_t>(tree.parents[static_cast<size_t>(i)])].push_back(i);
  Acceptance out;
  int32_t at = 0;
  for (;;) {
    const int32_t want = target_tokens[static_cast<size_t>(at)];
    int32_t next = -1;
    for (int32_t c : children[static_cast<size_t>(at)])
      if (tree.tokens[static_cast<size_t>(c)] == want) {
        next = c;
        break;
      }
    if (next < 0) {
      out.tokens.push_back(want);  // the bonus: the target's own token after the path
      return out;
    }
    out.nodes.push_back(next);
    out.tokens.push_back(want);
    at = next;
  }
}

}  // namespace peregrine::speculative
