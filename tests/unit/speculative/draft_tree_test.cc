// Draft trees: best-first construction against an exhaustive ranking, the verify layout, and
// acceptance giving exactly the tokens of non-speculative decoding (greedy, and sampled with
// the per-depth draws), for random drafters that are right, wrong or half right.
#include "speculative/draft_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

namespace peregrine::speculative {
namespace {

std::vector<DepthCandidates> RandomCandidates(int depths, int k, uint64_t seed, int32_t vocab = 1000) {
  std::mt19937_64 rng(seed);
  std::vector<DepthCandidates> out(static_cast<size_t>(depths));
  for (DepthCandidates& c : out) {
    std::vector<float> lp;
    for (int i = 0; i < k; ++i) lp.push_back(-static_cast<float>(rng() % 1000) / 100.0f);
    std::sort(lp.rbegin(), lp.rend());
    c.logprobs = lp;
    while (static_cast<int>(c.tokens.size()) < k) {
      const auto t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      if (std::find(c.tokens.begin(), c.tokens.end(), t) == c.tokens.end()) c.tokens.push_back(t);
    }
  }
  return out;
}

// Every rank path of depth <= D, best first: the reference order.
std::vector<std::vector<int32_t>> RankedPaths(const std::vector<DepthCandidates>& c) {
  std::vector<std::pair<double, std::vector<int32_t>>> all;
  std::vector<std::pair<double, std::vector<int32_t>>> level = {{0.0, {}}};
  for (const DepthCandidates& d : c) {
    std::vector<std::pair<double, std::vector<int32_t>>> next;
    for (const auto& [w, path] : level)
      for (size_t r = 0; r < d.tokens.size(); ++r) {
        std::vector<int32_t> p = path;
        p.push_back(static_cast<int32_t>(r));
        next.emplace_back(w + d.logprobs[r], p);
      }
    all.insert(all.end(), next.begin(), next.end());
    level = std::move(next);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::vector<int32_t>> out;
  for (auto& e : all) out.push_back(std::move(e.second));
  return out;
}

std::vector<int32_t> RankPath(const DraftTree& t, int32_t node) {
  std::vector<int32_t> path;
  for (; node > 0; node = t.parents[static_cast<size_t>(node)]) path.push_back(t.ranks[static_cast<size_t>(node)]);
  std::reverse(path.begin(), path.end());
  return path;
}

TEST(DraftTreeTest, BestFirstTakesTheHeaviestPathsInOrder) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto cands = RandomCandidates(4, 3, seed);
    const auto ranked = RankedPaths(cands);
    for (int64_t budget : {1, 5, 17, 60, 200}) {
      auto tree = BuildDraftTree(7, cands, budget);
      ASSERT_TRUE(tree.ok());
      const int64_t want = std::min<int64_t>(budget, static_cast<int64_t>(ranked.size()));
      ASSERT_EQ(tree->num_nodes(), want + 1) << seed << " " << budget;
      for (int32_t i = 1; i < tree->num_nodes(); ++i) {
        EXPECT_EQ(RankPath(*tree, i), ranked[static_cast<size_t>(i - 1)]) << seed << " node " << i;
        const int32_t parent = tree->parents[static_cast<size_t>(i)];
        EXPECT_LT(parent, i);
        EXPECT_EQ(tree->depths[static_cast<size_t>(i)], tree->depths[static_cast<size_t>(parent)] + 1);
        const DepthCandidates& at = cands[static_cast<size_t>(tree->depths[static_cast<size_t>(i)] - 1)];
        EXPECT_EQ(tree->tokens[static_cast<size_t>(i)], at.tokens[static_cast<size_t>(tree->ranks[static_cast<size_t>(i)])]);
      }
    }
  }
}

TEST(DraftTreeTest, LayoutMasksAncestorsAndPlacesDepths) {
  auto tree = BuildDraftTree(3, RandomCandidates(3, 2, 9), 6);
  ASSERT_TRUE(tree.ok());
  const auto n = static_cast<size_t>(tree->num_nodes());
  const std::vector<uint8_t> mask = tree->AncestorMask();
  ASSERT_EQ(mask.size(), n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      bool ancestor = false;
      for (int32_t a = static_cast<int32_t>(i); a >= 0; a = tree->parents[static_cast<size_t>(a)])
        ancestor = ancestor || a == static_cast<int32_t>(j);
      EXPECT_EQ(mask[i * n + j] != 0, ancestor) << i << " " << j;
    }
  const std::vector<int64_t> pos = tree->Positions(100);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(pos[i], 100 + tree->depths[i]);
}

TEST(DraftTreeTest, EdgesAndBadCandidates) {
  auto root = BuildDraftTree(5, {}, 10);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->num_nodes(), 1);
  EXPECT_EQ(BuildDraftTree(5, RandomCandidates(2, 2, 1), 0)->num_nodes(), 1);
  EXPECT_FALSE(BuildDraftTree(5, RandomCandidates(2, 2, 1), -1).ok());
  std::vector<DepthCandidates> bad = {{{1, 2}, {-1.0f}}};
  EXPECT_FALSE(BuildDraftTree(5, bad, 4).ok());
  bad = {{{1, 2}, {-2.0f, -1.0f}}};  // not most likely first
  EXPECT_FALSE(BuildDraftTree(5, bad, 4).ok());
  bad = {{{1}, {std::nanf("")}}};
  EXPECT_FALSE(BuildDraftTree(5, bad, 4).ok());
  bad = {{{}, {}}};
  EXPECT_FALSE(BuildDraftTree(5, bad, 4).ok());
  EXPECT_FALSE(Accept(*root, std::vector<int32_t>{1, 2}).ok());
}

TEST(DraftTreeTest, AcceptFollowsTheTargetsTokensAndAddsTheBonus) {
  const DraftTree chain = ChainTree(10, std::vector<int32_t>{11, 12, 13});
  auto all = Accept(chain, std::vector<int32_t>{11, 12, 13, 14});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->tokens, (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(all->nodes, (std::vector<int32_t>{1, 2, 3}));
  auto some = Accept(chain, std::vector<int32_t>{11, 99, 13, 14});
  EXPECT_EQ(some->tokens, (std::vector<int32_t>{11, 99}));
  auto none = Accept(chain, std::vector<int32_t>{42, 12, 13, 14});
  EXPECT_EQ(none->tokens, (std::vector<int32_t>{42}));
  EXPECT_TRUE(none->nodes.empty());
}

// A toy target over a small vocabulary: logits from a hash of the whole context.
constexpr int32_t kVocab = 12;
std::vector<double> TargetProbs(const std::vector<int32_t>& context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  std::vector<double> p(kVocab);
  double sum = 0.0;
  for (int32_t v = 0; v < kVocab; ++v) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    p[static_cast<size_t>(v)] = std::exp(static_cast<double>(h >> 40) / static_cast<double>(1ull << 24) * 3.0);
    sum += p[static_cast<size_t>(v)];
  }
  for (double& x : p) x /= sum;
  return p;
}
int32_t Pick(const std::vector<double>& p, double u) {  // u < 0: argmax
  if (u < 0) return static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  double c = 0.0;
  for (int32_t v = 0; v < kVocab; ++v)
    if ((c += p[static_cast<size_t>(v)]) > u) return v;
  return kVocab - 1;
}

// Speculative decoding with random draft trees gives the sequential tokens exactly: greedy,
// and sampled with draw i for the i-th generated token (the node at depth d of a step uses the
// step's d-th draw).
TEST(DraftTreeTest, AcceptedTokensAreTheNonSpeculativeOnes) {
  for (const bool sampled : {false, true}) {
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      std::mt19937_64 rng(seed);
      std::vector<double> draws(64);
      for (double& u : draws) u = sampled ? static_cast<double>(rng() >> 11) / 9007199254740992.0 : -1.0;
      std::vector<int32_t> sequential = {1, 2};
      while (sequential.size() < 2 + 40) sequential.push_back(Pick(TargetProbs(sequential), draws[sequential.size() - 2]));

      std::vector<int32_t> out = {1, 2};
      int steps = 0;
      while (out.size() < 2 + 40) {
        // A drafter that knows the sequential answer at some depths and guesses at others.
        std::vector<DepthCandidates> cands(4);
        for (size_t d = 0; d < cands.size(); ++d) {
          const size_t at = out.size() + d;
          std::vector<int32_t> toks;
          if (at < sequential.size() && rng() % 3 != 0) toks.push_back(sequential[at]);
          while (toks.size() < 3) {
            const auto t = static_cast<int32_t>(rng() % kVocab);
            if (std::find(toks.begin(), toks.end(), t) == toks.end()) toks.push_back(t);
          }
          if (rng() % 2) std::swap(toks[0], toks[1]);
          cands[d] = {toks, {-0.1f, -1.0f, -2.0f}};
        }
        auto tree = BuildDraftTree(out.back(), cands, 1 + static_cast<int64_t>(rng() % 12));
        ASSERT_TRUE(tree.ok());
        // The verify forward: the target's token at every node, from the node's context.
        std::vector<int32_t> target(static_cast<size_t>(tree->num_nodes()));
        for (int32_t i = 0; i < tree->num_nodes(); ++i) {
          std::vector<int32_t> ctx = out;
          std::vector<int32_t> path;
          for (int32_t a = i; a > 0; a = tree->parents[static_cast<size_t>(a)]) path.push_back(tree->tokens[static_cast<size_t>(a)]);
          ctx.insert(ctx.end(), path.rbegin(), path.rend());
          const size_t generated = out.size() - 2 + static_cast<size_t>(tree->depths[static_cast<size_t>(i)]);
          target[static_cast<size_t>(i)] = Pick(TargetProbs(ctx), draws[generated]);
        }
        auto accepted = Accept(*tree, target);
        ASSERT_TRUE(accepted.ok());
        for (int32_t t : accepted->tokens)
          if (out.size() < 2 + 40) out.push_back(t);
        ++steps;
      }
      EXPECT_EQ(out, sequential) << (sampled ? "sampled" : "greedy") << " seed " << seed;
      EXPECT_LT(steps, 40) << "the drafter's right guesses were never accepted";
    }
  }
}

}  // namespace
}  // namespace peregrine::speculative
