#include "runtime/cpu_model_runner.h"

#include <algorithm>
#include <string>

#include "runtime/host_scoring.h"
#include "scheduler/engine_request.h"
#include "sampling/token_bitmask.h"

namespace peregrine {

CpuModelRunner::CpuModelRunner(std::unique_ptr<HostModel> model, const CpuRunnerOptions& options)
    : model_(std::move(model)),
      options_(options),
      max_context_(options.max_context > 0
                       ? std::min(options.max_context, model_->config().max_position_embeddings)
                       : model_->config().max_position_embeddings) {
  KvBudget budget;
  budget.num_slots = options.num_slots;
  budget.prefix_caching = options.prefix_caching;
  budget.snapshot_fraction = options.snapshot_fraction;
  capacity_ = SizeKvPoolsForTokens(model_->kv_layout(options.block_tokens), options.kv_tokens, budget);
  kv_ = model_->CreateKvPools(options.block_tokens, capacity_.num_slots, capacity_.num_blocks, capacity_.num_snapshots);
  slot_positions_.assign(static_cast<size_t>(capacity_.num_slots), -1);
  slot_tokens_.assign(static_cast<size_t>(capacity_.num_slots), -1);
}

Status CpuModelRunner::ExportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                                TransferredKv* kv) {
  if (slot < 0 || slot >= capacity_.num_slots) return InvalidArgument("KV slot outside the pools");
  if (slot_positions_[static_cast<size_t>(slot)] != num_tokens)
    return Internal("the slot does not hold " + std::to_string(num_tokens) + " positions to export");
  if (static_cast<int64_t>(blocks.size()) != capacity_.layout.BlocksFor(num_tokens))
    return InvalidArgument("the block table does not match the exported positions");
  kv->device = nullptr;
  return kv_->ExportPages(slot, blocks, &kv->pages);
}

Status CpuModelRunner::ImportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                                const TransferredKv& kv) {
  if (kv.device != nullptr) return Unimplemented("KV pages in another process's device memory need the CUDA backend");
  if (slot < 0 || slot >= capacity_.num_slots) return InvalidArgument("KV slot outside the pools");
  if (num_tokens <= 0 || num_tokens >= max_context_) return InvalidArgument("imported positions outside the context");
  if (static_cast<int64_t>(blocks.size()) != capacity_.layout.BlocksFor(num_tokens))
    return InvalidArgument("the block table does not match the imported positions");
  slot_positions_[static_cast<size_t>(slot)] = -1;
  slot_tokens_[static_cast<size_t>(slot)] = -1;
  PG_RETURN_IF_ERROR(kv_->ImportPages(slot, blocks, kv.pages));
  slot_positions_[static_cast<size_t>(slot)] = num_tokens;
  return Status::Ok();
}

std::string CpuModelRunner::kv_fingerprint() const {
  return KvFingerprint("cpu-" + model_->kv_format() + "/" + model_->config().model_type + "/vocab=" + std::to_string(model_->config().vocab_size),
                       capacity_.layout);
}

std::vector<int32_t> CpuModelRunner::eos_token_ids() const {
  std::vector<int32_t> ids;
  for (int64_t id : model_->config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

Result<std::unique_ptr<CpuModelRunner>> CpuModelRunner::Create(std::unique_ptr<HostModel> model,
                                                               const CpuRunnerOptions& options) {
  PG_RETURN_IF_ERROR(speculative::Validate(options.speculative));
  if (options.speculative.needs_model_drafter() && !model->has_drafter())
    return InvalidArgument("speculative decoding needs a drafter: the checkpoint has no MTP layer");
  return std::make_unique<CpuModelRunner>(std::move(model), options);
}

Status CpuModelRunner::Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) {
  if (static_cast<int>(launched_.size()) >= max_in_flight()) return Internal("too many launched steps");
  const speculative::SpeculativeConfig& spec = options_.speculative;
  if (slot_drafts_.empty()) {
    slot_drafts_.resize(static_cast<size_t>(capacity_.num_slots));
    drafter_seq_.assign(static_cast<size_t>(capacity_.num_slots), -1);
  }
  std::vector<ChunkView> views;
  std::vector<std::vector<int32_t>> fed(chunks.size());
  std::vector<speculative::DraftTree> trees(chunks.size());  // verify chunks' trees (else empty)
  std::vector<std::vector<int32_t>> trimmed(chunks.size());
  views.reserve(chunks.size());
  const int64_t block = capacity_.layout.block_tokens;
  for (size_t i = 0; i < chunks.size(); ++i) {
    ChunkView v = chunks[i].view;
    if (v.slot < 0 || v.slot >= capacity_.num_slots)
      return Internal("KV slot " + std::to_string(v.slot) + " outside the pools");
    const int64_t at = slot_positions_[static_cast<size_t>(v.slot)];
    const bool restarts = v.first_position == 0 || v.restore >= 0;
    if (!restarts && v.first_position != at)
      return Internal("runner state out of step for sequence " + std::to_string(chunks[i].seq_id));
    if (v.feeds_last) {
      // The slot's newest token, sampled by the previous step (already on the host here).
      const int32_t last = slot_tokens_[static_cast<size_t>(v.slot)];
      if (last < 0) return Internal("a chunk is fed from a slot that sampled nothing");
      fed[i].assign(v.tokens.begin(), v.tokens.end());
      fed[i].push_back(last);
      v.tokens = fed[i];
      v.feeds_last = false;
    }
    const int32_t lookahead = spec.enabled() ? chunks[i].lookahead : -1;
    if (lookahead > 0 && !spec.needs_model_drafter() && v.num_tokens == 1 && v.needs_logits && !v.all_logits) {
      // The n-gram drafter: a chain copied from the sequence's own earlier tokens.
      const std::vector<int32_t> chain =
          speculative::NgramChainAfter(chunks[i].history, v.first_position, v.tokens[0], spec.ngram, lookahead);
      if (!chain.empty()) {
        trees[i] = speculative::ChainTree(v.tokens[0], chain);
        v.tokens = trees[i].tokens;
        v.num_tokens = trees[i].num_nodes();
        v.tree_parents = trees[i].parents;
      }
    } else if (lookahead >= 0 && spec.needs_model_drafter()) {
      v.keep_hidden = true;
      const SlotDraft& d = slot_drafts_[static_cast<size_t>(v.slot)];
      const bool can_verify = lookahead > 0 && v.num_tokens == 1 && v.needs_logits && !v.all_logits &&
                              d.position == v.first_position && !d.candidates.empty() &&
                              drafter_seq_[static_cast<size_t>(v.slot)] == chunks[i].seq_id;
      if (can_verify) {
        const size_t depth = std::min(d.candidates.size(), static_cast<size_t>(lookahead));
        const std::span<const speculative::DepthCandidates> cands(d.candidates.data(), depth);
        if (spec.algorithm == speculative::Algorithm::kDdtree) {
          PG_ASSIGN_OR_RETURN(trees[i], speculative::BuildDraftTree(v.tokens[0], cands, spec.max_nodes()));
        } else {
          std::vector<int32_t> chain;
          for (const speculative::DepthCandidates& c : cands) chain.push_back(c.tokens.front());
          trees[i] = speculative::ChainTree(v.tokens[0], chain);
        }
        v.tokens = trees[i].tokens;
        v.num_tokens = trees[i].num_nodes();
        v.tree_parents = trees[i].parents;
      }
    }
    if (lookahead >= 0) {
      // The engine took snapshots for every boundary the lookahead could reach; the chunk
      // passes those its deepest token reaches (the rest go back when the engine trims).
      if (block > 0 && !v.snapshots.empty()) {
        const int64_t reach = (v.first_position + v.span()) / block - v.first_position / block;
        trimmed[i].assign(v.snapshots.begin(), v.snapshots.begin() + std::min<int64_t>(reach, static_cast<int64_t>(v.snapshots.size())));
        v.snapshots = trimmed[i];
      }
    }
    views.push_back(v);
  }
  std::vector<float> logits;
  const Status s = model_->Forward(views, *kv_, &logits);
  for (const ChunkView& v : views)
    slot_positions_[static_cast<size_t>(v.slot)] = s.ok() && v.tree_parents.empty() ? v.first_position + v.num_tokens : -1;
  PG_RETURN_IF_ERROR(s);

  const int64_t vocab = model_->config().vocab_size;
  Launched step;
  PG_RETURN_IF_ERROR(ScoreOnHost(chunks, logits, vocab, &step.scores, views));
  auto logits_row = [&](size_t r) {
    return std::span<float>(logits.data() + r * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
  };
  std::vector<DraftInput> drafts;
  std::vector<std::vector<int32_t>> draft_rows(chunks.size()), draft_tokens(chunks.size());
  size_t row = 0, first_row = 0, step_row = 0;
  for (size_t ci = 0; ci < views.size(); ++ci) {
    const ChunkView& v = views[ci];
    const size_t chunk_first = first_row;
    const int64_t chunk_step_row = static_cast<int64_t>(step_row);
    first_row += static_cast<size_t>(v.logit_rows());
    step_row += static_cast<size_t>(v.num_tokens);
    const bool follows = spec.needs_model_drafter() && chunks[ci].lookahead >= 0;
    if (follows) {
      // What the drafter reads after this step: the rows whose state is now committed.
      std::vector<int32_t>& rows_out = draft_rows[ci];
      std::vector<int32_t>& toks = draft_tokens[ci];
      if (v.tree_parents.empty()) {
        for (int64_t k = 0; k < v.num_tokens; ++k) rows_out.push_back(static_cast<int32_t>(chunk_step_row + k));
        toks.assign(v.tokens.begin(), v.tokens.end());
      }
    }
    if (!v.needs_logits) continue;
    if (row >= sampling.size()) return Internal("one sampling entry per sampled chunk expected");
    const RunnerSampling& smp = sampling[row];
    step.rng_before.push_back(smp.state->rng());
    step.states.push_back(smp.state);
    step.drafts.emplace_back();
    if (!v.tree_parents.empty()) {
      // Verify: the target's token at every node, each with the state (tokens and draws) it
      // would have when decoding that node's path one token at a time.
      if (smp.mask != RowMask::kNone) return Internal("a speculating row cannot carry a grammar mask");
      const speculative::DraftTree& tree = trees[ci];
      const auto n = static_cast<size_t>(tree.num_nodes());
      // states[j]: the request's state once the tokens on node j's path after the root are
      // appended, with one draw per token sampled before (what Sample at node j starts from).
      std::vector<SequenceSamplingState> states;
      states.reserve(n);
      std::vector<SampleResult> targets(n);
      std::vector<int32_t> target_tokens(n);
      const auto draws = static_cast<unsigned long long>(DrawsPerToken(*smp.params));
      for (size_t j = 0; j < n; ++j) {
        const int32_t parent = tree.parents[j];
        states.push_back(parent < 0 ? *smp.state : states[static_cast<size_t>(parent)]);
        if (parent >= 0) {
          states[j].Append(tree.tokens[j]);
          states[j].rng().discard(draws);
        }
        SequenceSamplingState probe = states[j];
        targets[j] = Sample(logits_row(chunk_first + j), *smp.params, probe);
        target_tokens[j] = targets[j].token;
      }
      PG_ASSIGN_OR_RETURN(speculative::Acceptance acc, speculative::Accept(tree, target_tokens));
      std::vector<int32_t> path = {0};
      path.insert(path.end(), acc.nodes.begin(), acc.nodes.end());
      for (size_t k = 0; k + 1 < path.size(); ++k) step.drafts.back().push_back(targets[static_cast<size_t>(path[k])]);
      step.results.push_back(targets[static_cast<size_t>(path.back())]);
      // The request's state as sequential decoding leaves it: every accepted token appended, one draw each.
      SequenceSamplingState& real = *smp.state;
      for (size_t k = 0; k < path.size(); ++k) {
        real.Append(k + 1 < path.size() ? tree.tokens[static_cast<size_t>(path[k + 1])] : step.results.back().token);
        real.rng().discard(draws);
      }
      PG_RETURN_IF_ERROR(model_->CommitTree(*kv_, v.slot, v.blocks, path));
      slot_positions_[static_cast<size_t>(v.slot)] = v.first_position + static_cast<int64_t>(path.size());
      slot_tokens_[static_cast<size_t>(v.slot)] = step.results.back().token;
      ++spec_counts_.num_drafts;
      spec_counts_.num_draft_tokens += static_cast<int64_t>(n) - 1;
      spec_counts_.num_accepted_tokens += static_cast<int64_t>(acc.nodes.size());
      if (spec_counts_.accepted_per_position.size() < static_cast<size_t>(spec.lookahead()))
        spec_counts_.accepted_per_position.resize(static_cast<size_t>(spec.lookahead()), 0);
      for (size_t k = 0; k < acc.nodes.size(); ++k) ++spec_counts_.accepted_per_position[k];
      for (int32_t node : path) draft_rows[ci].push_back(static_cast<int32_t>(chunk_step_row + node));
      for (int32_t node : path) draft_tokens[ci].push_back(tree.tokens[static_cast<size_t>(node)]);
      draft_tokens[ci].push_back(step.results.back().token);
      ++row;
      continue;
    }
    std::span<float> row_logits = logits_row(first_row - 1);
    if (smp.mask == RowMask::kDeferred) {
      step.deferred.push_back(row);
      step.deferred_slots.push_back(v.slot);
      step.deferred_params.push_back(smp.params);
      step.deferred_logits.insert(step.deferred_logits.end(), row_logits.begin(), row_logits.end());
      step.results.emplace_back();
      slot_tokens_[static_cast<size_t>(v.slot)] = -1;
      ++row;
      continue;
    }
    if (smp.mask == RowMask::kReady)
      ApplyTokenBitmask(row_logits, std::span(smp.mask_words, static_cast<size_t>(TokenMaskWords(vocab))));
    step.results.push_back(Sample(row_logits, *smp.params, *smp.state));
    slot_tokens_[static_cast<size_t>(v.slot)] = step.results.back().token;
    if (follows) draft_tokens[ci].push_back(step.results.back().token);
    ++row;
  }
  if (row != sampling.size()) return Internal("one sampling entry per sampled chunk expected");

  // The drafter follows every speculating sequence; sampled rows get the next step's candidates.
  std::vector<size_t> drafted;
  for (size_t ci = 0; ci < views.size(); ++ci) {
    if (!spec.needs_model_drafter() || chunks[ci].lookahead < 0) continue;
    const ChunkView& v = views[ci];
    DraftInput in;
    in.slot = v.slot;
    in.first_position = v.first_position;
    in.rows = draft_rows[ci];
    in.tokens = draft_tokens[ci];
    in.restart = v.first_position == 0 || v.restore >= 0 || drafter_seq_[static_cast<size_t>(v.slot)] != chunks[ci].seq_id;
    in.num_steps = v.needs_logits && in.tokens.size() == in.rows.size() + 1 ? spec.num_steps : 0;
    in.top_k = spec.candidates();
    drafter_seq_[static_cast<size_t>(v.slot)] = chunks[ci].seq_id;
    slot_drafts_[static_cast<size_t>(v.slot)] = {};
    drafts.push_back(in);
    drafted.push_back(ci);
  }
  if (!drafts.empty()) {
    std::vector<std::vector<speculative::DepthCandidates>> proposals;
    PG_RETURN_IF_ERROR(model_->Draft(*kv_, drafts, &proposals));
    for (size_t k = 0; k < drafted.size(); ++k) {
      if (proposals[k].empty()) continue;
      const DraftInput& in = drafts[k];
      slot_drafts_[static_cast<size_t>(in.slot)] = {in.first_position + static_cast<int64_t>(in.rows.size()),
                                                    std::move(proposals[k])};
    }
  }
  launched_.push_back(std::move(step));
  return Status::Ok();
}

Status CpuModelRunner::SupplyMasks(std::span<const uint32_t* const> masks) {
  if (launched_.empty()) return Internal("masks supplied with no launched step");
  Launched& step = launched_.back();
  if (masks.size() != step.deferred.size()) return Internal("one mask per deferred row expected");
  const auto vocab = static_cast<size_t>(model_->config().vocab_size);
  for (size_t k = 0; k < masks.size(); ++k) {
    const size_t row = step.deferred[k];
    std::span<float> row_logits(step.deferred_logits.data() + k * vocab, vocab);
    if (masks[k] != nullptr)
      ApplyTokenBitmask(row_logits, std::span(masks[k], static_cast<size_t>(TokenMaskWords(static_cast<int64_t>(vocab)))));
    step.results[row] = Sample(row_logits, *step.deferred_params[k], *step.states[row]);
    slot_tokens_[static_cast<size_t>(step.deferred_slots[k])] = step.results[row].token;
  }
  step.deferred.clear();
  step.deferred_logits.clear();
  return Status::Ok();
}

Status CpuModelRunner::Collect(std::span<const uint8_t> skip, CollectedStep* out) {
  if (launched_.empty()) return Internal("no launched step to collect");
  Launched step = std::move(launched_.front());
  launched_.pop_front();
  if (!step.deferred.empty()) return Internal("a step was collected before its deferred masks arrived");
  if (skip.size() != step.results.size()) return Internal("collect: one skip flag per sampling row expected");
  out->samples.assign(step.results.size(), SampleResult{});
  out->drafts.assign(step.results.size(), {});
  out->refeed_failed.assign(step.results.size(), 0);
  for (size_t i = 0; i < skip.size(); ++i) {
    if (skip[i]) {
      step.states[i]->rng() = step.rng_before[i];  // a restarting sequence draws this token again
      continue;
    }
    out->samples[i] = std::move(step.results[i]);
    if (i < step.drafts.size()) out->drafts[i] = std::move(step.drafts[i]);
  }
  out->scores = std::move(step.scores);
  return Status::Ok();
}

}  // namespace peregrine
