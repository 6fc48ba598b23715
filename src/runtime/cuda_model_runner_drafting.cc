// CudaModelRunner's drafting half (see cuda_model_runner.h): the verify trees a step's
// speculating rows get (PlanVerify) and the device drafter following the kept tokens after a
// step (FollowDrafter). Acceptance and the node sampling rows stay with Launch and Collect.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "runtime/cuda_model_runner.h"
#include "speculative/draft_tree.h"
#include "speculative/ngram.h"

namespace peregrine {

void CudaModelRunner::PlanVerify(LaunchSlot& slot, std::span<const RunnerChunk> chunks,
                                 std::span<const RunnerSampling> sampling) {
  step_trees_.assign(step_.size(), {});
  step_snapshots_.assign(step_.size(), {});
  slot.trees.assign(sampling.size(), {});
  slot.first_positions.assign(sampling.size(), 0);
  slot.verifies = false;
  if (!speculative_.enabled()) return;
  const int64_t block = executor_->kv_capacity().layout.block_tokens;
  // Each speculating one-token row's depth (0: it does not verify) and draft chain (DDTree:
  // the candidates of each depth the chain follows).
  std::vector<int64_t> depths(step_.size(), 0);
  std::vector<std::vector<int32_t>> chains(step_.size());
  std::vector<std::span<const speculative::DepthCandidates>> candidates(step_.size());
  const bool trees = DraftsTrees();
  bool all_rows_speculate = true, any_chain = false;
  for (size_t ci = 0, row = 0; ci < step_.size(); ++ci) {
    const ChunkView& v = step_[ci];
    const RunnerChunk& chunk = chunks[ci];
    const bool eligible = chunk.lookahead > 0 && v.needs_logits && v.num_tokens == 1 && !v.all_logits &&
                          !v.feeds_last && row < sampling.size() && sampling[row].mask == RowMask::kNone &&
                          chunk.scoring.targets.empty();
    row += v.needs_logits ? 1 : 0;
    if (!eligible) {
      all_rows_speculate = false;
      continue;
    }
    // The chain stops before the first block boundary that takes a snapshot (the verify
    // step writes none; the plain step that reaches it does).
    int64_t depth = chunk.lookahead;
    for (size_t i = 0; block > 0 && i < v.snapshots.size(); ++i) {
      if (v.snapshots[i] < 0) continue;
      const int64_t boundary = (v.first_position / block + 1 + static_cast<int64_t>(i)) * block;
      depth = std::min(depth, boundary - v.first_position - 2);
      break;
    }
    depths[ci] = std::max<int64_t>(depth, 0);
    std::vector<int32_t>& chain = chains[ci];
    if (depth > 0 && speculative_.algorithm == speculative::Algorithm::kNgram) {
      chain = speculative::NgramChainAfter(chunk.history, v.first_position, v.tokens[0], speculative_.ngram,
                                           static_cast<int32_t>(depth));
    } else if (depth > 0 && static_cast<size_t>(v.slot) < drafters_.size()) {
      // The device drafter's chain after this very token (drafted when it was sampled).
      const SlotDrafter& d = drafters_[static_cast<size_t>(v.slot)];
      if (d.seq_id == chunk.seq_id && d.drafts_at == v.first_position) {
        const int64_t vocab = executor_->config().vocab_size;
        for (size_t k = 0; k < d.drafts.size(); ++k) {
          const int32_t t = d.drafts[k];
          if (static_cast<int64_t>(chain.size()) >= depth || t < 0 || t >= vocab) break;
          if (trees) {
            // A depth whose candidates are unusable ends the tree there.
            const speculative::DepthCandidates& c = d.candidates[k];
            bool usable = !c.tokens.empty() && c.tokens.size() == c.logprobs.size();
            for (size_t j = 0; usable && j < c.tokens.size(); ++j)
              usable = c.tokens[j] >= 0 && c.tokens[j] < vocab && std::isfinite(c.logprobs[j]) &&
                       (j == 0 || c.logprobs[j] <= c.logprobs[j - 1]);
            if (!usable) break;
          }
          chain.push_back(t);
        }
        if (trees) candidates[ci] = std::span(d.candidates).first(chain.size());
      }
    }
    any_chain = any_chain || !chain.empty();
  }
  // Chains are padded to their depth with their last token (the row's token when it has no
  // draft), DDTree trees to the node budget with children of the root holding its token:
  // guesses like any other. When every row of the step speculates they then share one node
  // count, and the step replays one graph per (bucket, nodes) instead of running eagerly.
  const bool pad_all = all_rows_speculate && any_chain;
  for (size_t ci = 0, row = 0; ci < step_.size(); ++ci) {
    ChunkView& v = step_[ci];
    std::vector<int32_t>& chain = chains[ci];
    if (depths[ci] > 0 && (!chain.empty() || pad_all)) {
      speculative::DraftTree& tree = step_trees_[ci];
      Result<speculative::DraftTree> built = InvalidArgument("no candidates");
      if (trees && !candidates[ci].empty())
        built = speculative::BuildDraftTree(v.tokens[0], candidates[ci], speculative_.max_nodes());
      if (built.ok()) {
        tree = std::move(built).value();
      } else {
        const int32_t last = chain.empty() ? v.tokens[0] : chain.back();
        chain.resize(static_cast<size_t>(depths[ci]), last);
        tree = speculative::ChainTree(v.tokens[0], chain);
      }
      for (int64_t n = tree.num_nodes(); trees && n < 1 + static_cast<int64_t>(speculative_.max_nodes()); ++n) {
        tree.tokens.push_back(tree.tokens[0]);
        tree.parents.push_back(0);
        tree.depths.push_back(1);
        tree.ranks.push_back(0);
        tree.weights.push_back(0.0);
      }
      v.tokens = tree.tokens;
      v.num_tokens = tree.num_nodes();
      v.tree_parents = tree.parents;
      slot.trees[row] = tree;
      slot.first_positions[row] = v.first_position;
      slot.verifies = true;
    }
    // The engine took snapshots for every boundary the lookahead could reach; the chunk
    // passes those it reaches (the engine takes the rest back).
    if (chunks[ci].lookahead >= 0 && block > 0 && !v.snapshots.empty()) {
      const int64_t reach = (v.first_position + v.span()) / block - v.first_position / block;
      step_snapshots_[ci].assign(v.snapshots.begin(),
                                 v.snapshots.begin() + std::min<int64_t>(reach, static_cast<int64_t>(v.snapshots.size())));
      v.snapshots = step_snapshots_[ci];
    }
    row += v.needs_logits ? 1 : 0;
  }
}

Status CudaModelRunner::FollowDrafter(LaunchSlot& slot, std::span<const uint8_t> skip,
                                      std::span<const SampleResult> results, std::span<const TreeCommit> commits) {
  if (drafters_.empty()) drafters_.resize(slot_positions_.size());
  std::vector<DevicePairs> inputs;
  std::vector<std::vector<int32_t>> rows(slot.records.size()), next(slot.records.size());
  std::vector<size_t> drafting;  // records that draft, in input order
  for (size_t k = 0; k < slot.records.size(); ++k) {
    const LaunchSlot::ChunkRecord& r = slot.records[k];
    SlotDrafter& d = drafters_[static_cast<size_t>(r.slot)];
    d.drafts.clear();
    d.candidates.clear();
    d.drafts_at = -1;
    const bool sampled = r.sampling_row >= 0;
    if (sampled && skip[static_cast<size_t>(r.sampling_row)]) {
      d = {};  // the sequence finished or starts over
      continue;
    }
    // The rows whose state is committed, by position: a tree's kept root path (as node
    // indices), else every token.
    std::vector<int32_t> kept(r.tokens.size());
    for (size_t j = 0; j < kept.size(); ++j) kept[j] = static_cast<int32_t>(j);
    for (const TreeCommit& c : commits)
      if (sampled && slot.num_nodes[static_cast<size_t>(r.sampling_row)] > 1 && c.slot == r.slot) kept = c.nodes;
    const auto n = static_cast<int64_t>(kept.size());
    const bool continues = !r.restarts && d.seq_id == r.seq_id &&
                           (d.pending ? d.paired_end == r.first_position - 1 : d.paired_end == r.first_position);
    DevicePairs in;
    in.slot = r.slot;
    in.restart = !continues;
    in.first_position = continues && d.pending ? r.first_position - 1 : r.first_position;
    std::vector<int32_t>& rr = rows[k];
    std::vector<int32_t>& nx = next[k];
    if (continues && d.pending) {
      rr.push_back(-1);
      nx.push_back(r.tokens[0]);
    }
    for (int64_t j = 0; j + 1 < n; ++j) {
      rr.push_back(static_cast<int32_t>(r.first_row + kept[static_cast<size_t>(j)]));
      nx.push_back(r.tokens[static_cast<size_t>(kept[static_cast<size_t>(j + 1)])]);
    }
    if (sampled) {
      rr.push_back(static_cast<int32_t>(r.first_row + kept.back()));
      nx.push_back(results[static_cast<size_t>(r.sampling_row)].token);
    } else {
      in.pending_row = static_cast<int32_t>(r.first_row + kept.back());
    }
    in.rows = rr;
    in.next = nx;
    in.draft = sampled && r.lookahead >= 0 && !rr.empty();
    d.seq_id = r.seq_id;
    d.paired_end = in.first_position + static_cast<int64_t>(rr.size());
    d.pending = !sampled;
    if (in.draft) {
      d.drafts_at = r.first_position + n;
      drafting.push_back(k);
    }
    inputs.push_back(in);
  }
  std::vector<int32_t> tokens;
  std::vector<speculative::DepthCandidates> candidates;
  const bool trees = DraftsTrees();
  const int32_t steps = speculative_.num_steps;
  PG_RETURN_IF_ERROR(executor_->Draft(inputs, steps, &tokens, trees ? &candidates : nullptr));
  const size_t per_input = static_cast<size_t>(steps);
  if (tokens.size() != drafting.size() * per_input || (trees && candidates.size() != tokens.size()))
    return Internal("the drafter returned too few tokens");
  for (size_t i = 0; i < drafting.size(); ++i) {
    SlotDrafter& d = drafters_[static_cast<size_t>(slot.records[drafting[i]].slot)];
    const auto begin = static_cast<std::ptrdiff_t>(i * per_input), end = static_cast<std::ptrdiff_t>((i + 1) * per_input);
    d.drafts.assign(tokens.begin() + begin, tokens.begin() + end);
    if (trees) d.candidates.assign(candidates.begin() + begin, candidates.begin() + end);
  }
  return Status::Ok();
}

}  // namespace peregrine
