#include "runtime/cpu_model_runner.h"

#include <algorithm>
#include <string>

#include "runtime/host_scoring.h"
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

std::vector<int32_t> CpuModelRunner::eos_token_ids() const {
  std::vector<int32_t> ids;
  for (int64_t id : model_->config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

Status CpuModelRunner::Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) {
  if (static_cast<int>(launched_.size()) >= max_in_flight()) return Internal("too many launched steps");
  std::vector<ChunkView> views;
  std::vector<std::vector<int32_t>> fed(chunks.size());
  views.reserve(chunks.size());
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
    views.push_back(v);
  }
  std::vector<float> logits;
  const Status s = model_->Forward(views, *kv_, &logits);
  for (const ChunkView& v : views)
    slot_positions_[static_cast<size_t>(v.slot)] = s.ok() ? v.first_position + v.num_tokens : -1;
  PG_RETURN_IF_ERROR(s);

  const int64_t vocab = model_->config().vocab_size;
  Launched step;
  PG_RETURN_IF_ERROR(ScoreOnHost(chunks, logits, vocab, &step.scores));
  auto logits_row = [&](size_t r) {
    return std::span<float>(logits.data() + r * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
  };
  size_t row = 0, first_row = 0;
  for (const ChunkView& v : views) {
    first_row += static_cast<size_t>(v.logit_rows());
    if (!v.needs_logits) continue;
    if (row >= sampling.size()) return Internal("one sampling entry per sampled chunk expected");
    const RunnerSampling& smp = sampling[row];
    step.rng_before.push_back(smp.state->rng());
    step.states.push_back(smp.state);
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
    ++row;
  }
  if (row != sampling.size()) return Internal("one sampling entry per sampled chunk expected");
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

Status CpuModelRunner::Collect(std::span<const uint8_t> skip, std::vector<SampleResult>* results,
                               std::vector<uint8_t>* refeed_failed, std::vector<ChunkScores>* scores) {
  if (launched_.empty()) return Internal("no launched step to collect");
  Launched step = std::move(launched_.front());
  launched_.pop_front();
  if (!step.deferred.empty()) return Internal("a step was collected before its deferred masks arrived");
  if (skip.size() != step.results.size()) return Internal("collect: one skip flag per sampling row expected");
  results->assign(step.results.size(), SampleResult{});
  refeed_failed->assign(step.results.size(), 0);
  for (size_t i = 0; i < skip.size(); ++i) {
    if (skip[i]) {
      step.states[i]->rng() = step.rng_before[i];  // a restarting sequence draws this token again
      continue;
    }
    (*results)[i] = std::move(step.results[i]);
  }
  *scores = std::move(step.scores);
  return Status::Ok();
}

}  // namespace peregrine
