// The engine tests' fake runner and helpers (engine_test.cc, engine_grammar_test.cc): a
// "model" whose next token is a function of the previous token and the position, run through
// the host sampler, with overlapped steps, refeed failures and deferred grammar masks.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "sampling/token_bitmask.h"

namespace peregrine::engine_testing {

constexpr int64_t kVocab = 50;
constexpr int32_t kEos = 1;

// Next token from (previous token, position): recomputation reproduces it exactly. Token 42
// is always followed by EOS.
inline int32_t NextToken(int32_t last, int64_t position) {
  if (last == 42) return kEos;
  int32_t t = static_cast<int32_t>((last * 7 + position * 3 + 5) % kVocab);
  return t == kEos ? 2 : t;
}

// A runner whose "model" is NextToken: it checks that every chunk continues its slot where
// the last one left it (or restarts it at 0, or at a restored block boundary), samples with the
// host sampler, and keeps each slot's newest token for chunks that feed their last token.
// With `overlap` it reports two steps in flight, as the CUDA runner does; rows whose token
// `refeed_fails` picks are "finished on the host": the slot's token buffer gets 0 (wrong)
// for them, as the device has no token for a row it gave up on.
class FakeRunner final : public ModelRunner {
 public:
  explicit FakeRunner(int32_t num_blocks = 64, int32_t num_snapshots = 0) {
    capacity.layout.block_tokens = 16;
    capacity.layout.first_entry_tokens = 4;
    capacity.layout.paged = {{"entries", 64}};
    capacity.layout.per_request = {{"state", 32}};
    capacity.layout.snapshot_bytes = 16;
    capacity.num_slots = 8;
    capacity.num_blocks = num_blocks;
    capacity.num_snapshots = num_snapshots;
    slot_positions.assign(8, -1);
    slot_tokens.assign(8, -1);
  }

  int max_in_flight() const override { return overlap ? 2 : 1; }
  Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) override {
    if (fail_next) return Internal("injected runner failure");
    if (static_cast<int>(launched.size()) >= max_in_flight()) return Internal("fake runner: too many launched steps");
    Step step;
    int64_t step_scored_rows = 0;
    std::vector<float> logits;
    for (const RunnerChunk& rc : chunks) {
      const ChunkView& c = rc.view;
      int64_t& pos = slot_positions[static_cast<size_t>(c.slot)];
      if (c.restore >= 0) {
        if (c.first_position % capacity.layout.block_tokens != 0) return Internal("fake runner: restore off a boundary");
        pos = c.first_position;
        ++restores;
      }
      if (c.first_position == 0) pos = 0;
      if (pos != c.first_position) return Internal("fake runner: out of step");
      if (static_cast<int64_t>(c.tokens.size()) + (c.feeds_last ? 1 : 0) != c.num_tokens)
        return Internal("fake runner: chunk tokens and length disagree");
      if (capacity.layout.BlocksFor(c.first_position + c.num_tokens) > static_cast<int64_t>(c.blocks.size()))
        return Internal("fake runner: the block table does not cover the chunk");
      int32_t last = c.tokens.empty() ? -1 : c.tokens.back();
      if (c.feeds_last) {
        last = slot_tokens[static_cast<size_t>(c.slot)];
        if (last < 0) return Internal("fake runner: fed from a slot that sampled nothing");
        ++fed_chunks;
        fed_seqs.push_back(rc.seq_id);
      }
      if (!rc.scoring.targets.empty()) {
        // Row i holds the logits after the chunk's i-th token, at position first + i.
        if (!c.all_logits || rc.scoring.targets.size() + (c.needs_logits ? 1 : 0) > static_cast<size_t>(c.num_tokens))
          return Internal("fake runner: scoring targets without a logits row each");
        ChunkScores& scores = step.scores.emplace_back();
        for (size_t i = 0; i < rc.scoring.targets.size(); ++i) {
          const std::vector<float> row = RowAfter(c.tokens[i], c.first_position + static_cast<int64_t>(i));
          scores.push_back(ScoreToken(row, rc.scoring.targets[i], rc.scoring.num_top));
        }
        step_scored_rows += static_cast<int64_t>(c.num_tokens);
        scored_chunks.push_back({rc.seq_id, c.first_position, static_cast<int64_t>(rc.scoring.targets.size())});
      }
      pos += c.num_tokens;
      max_chunk = std::max<int64_t>(max_chunk, c.num_tokens);
      if (!c.needs_logits) continue;
      const std::vector<float> row = RowAfter(last, pos - 1);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    if (logits.size() != sampling.size() * kVocab) return Internal("fake runner: one sampling entry per logits row");
    size_t row = 0;
    for (const RunnerChunk& rc : chunks) {
      if (!rc.view.needs_logits) continue;
      std::span<float> row_logits(logits.data() + row * kVocab, kVocab);
      if (sampling[row].mask == RowMask::kDeferred) {
        // Sampled when SupplyMasks brings the mask (its slot's token is unknown until then).
        if (!defers) return Internal("fake runner: a deferred mask it did not ask for");
        step.deferred.push_back({row, rc.view.slot, sampling[row].params, sampling[row].state,
                                 std::vector<float>(row_logits.begin(), row_logits.end())});
        step.results.emplace_back();
        step.refeed_failed.push_back(0);
        step.rng_after.emplace_back();
        step.states.push_back(sampling[row].state);
        slot_tokens[static_cast<size_t>(rc.view.slot)] = -1;
        ++row;
        continue;
      }
      if (sampling[row].mask == RowMask::kReady) {
        ApplyTokenBitmask(row_logits, std::span(sampling[row].mask_words, TokenMaskWords(kVocab)));
        ++ready_masks;
      }
      step.results.push_back(Sample(row_logits, *sampling[row].params, *sampling[row].state));
      const bool fails = refeed_fails && refeed_fails(step.results.back().token);
      step.refeed_failed.push_back(fails ? 1 : 0);
      step.rng_after.push_back(sampling[row].state->rng());
      step.states.push_back(sampling[row].state);
      slot_tokens[static_cast<size_t>(rc.view.slot)] = fails ? 0 : step.results.back().token;
      ++row;
    }
    if (step_scored_rows > scored_rows_per_step) return Internal("fake runner: more scored rows than it offers");
    launched.push_back(std::move(step));
    max_launched = std::max<int64_t>(max_launched, static_cast<int64_t>(launched.size()));
    return Status::Ok();
  }
  Status SupplyMasks(std::span<const uint32_t* const> masks) override {
    if (launched.empty()) return Internal("fake runner: masks with nothing launched");
    Step& step = launched.back();
    if (masks.size() != step.deferred.size()) return Internal("fake runner: one mask per deferred row");
    for (size_t k = 0; k < masks.size(); ++k) {
      Deferred& d = step.deferred[k];
      if (masks[k] != nullptr) ApplyTokenBitmask(d.logits, std::span(masks[k], TokenMaskWords(kVocab)));
      step.results[d.row] = Sample(d.logits, *d.params, *d.state);
      step.rng_after[d.row] = d.state->rng();
      slot_tokens[static_cast<size_t>(d.slot)] = step.results[d.row].token;
      ++deferred_masks;
    }
    step.deferred.clear();
    return Status::Ok();
  }
  bool defers_masks() const override { return defers; }
  Status Collect(std::span<const uint8_t> skip, CollectedStep* out) override {
    std::vector<SampleResult>* results = &out->samples;
    std::vector<uint8_t>* refeed_failed = &out->refeed_failed;
    std::vector<ChunkScores>* scores = &out->scores;
    out->drafts.assign(skip.size(), {});
    if (launched.empty()) return Internal("fake runner: nothing to collect");
    Step step = std::move(launched.front());
    launched.pop_front();
    if (!step.deferred.empty()) return Internal("fake runner: collected before its masks arrived");
    if (skip.size() != step.results.size()) return Internal("fake runner: one skip flag per row expected");
    results->assign(step.results.size(), SampleResult{});
    for (size_t i = 0; i < skip.size(); ++i) {
      if (skip[i]) continue;
      (*results)[i] = step.results[i];
      // The device runner finishes such a row with the RNG as it stood after this step's draw.
      if (step.refeed_failed[i]) step.states[i]->rng() = step.rng_after[i];
    }
    *refeed_failed = step.refeed_failed;
    *scores = std::move(step.scores);
    return Status::Ok();
  }
  KvCapacity kv_capacity() const override { return capacity; }
  int64_t max_scored_rows() const override { return scored_rows_per_step; }

  // The "model's" logits after `token` at `position`.
  static std::vector<float> RowAfter(int32_t token, int64_t position) {
    std::vector<float> row(kVocab, 0.0f);
    row[static_cast<size_t>(NextToken(token, position))] = 5.0f;
    return row;
  }
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_context() const override { return 4096; }
  std::vector<int32_t> eos_token_ids() const override { return {kEos}; }

  KvCapacity capacity;
  std::vector<int64_t> slot_positions;
  std::vector<int32_t> slot_tokens;
  int64_t max_chunk = 0;
  bool fail_next = false;
  int64_t restores = 0;
  int64_t scored_rows_per_step = 24;
  struct ScoredChunk {
    int64_t seq_id, first, num_targets;
  };
  std::vector<ScoredChunk> scored_chunks;
  struct Deferred {
    size_t row;
    int32_t slot;
    const SamplingParams* params;
    SequenceSamplingState* state;
    std::vector<float> logits;
  };
  struct Step {
    std::vector<Deferred> deferred;
    std::vector<SampleResult> results;
    std::vector<uint8_t> refeed_failed;
    std::vector<std::mt19937_64> rng_after;
    std::vector<SequenceSamplingState*> states;
    std::vector<ChunkScores> scores;
  };
  bool overlap = false;
  bool defers = true;  // takes deferred grammar masks
  int64_t ready_masks = 0, deferred_masks = 0;
  std::function<bool(int32_t)> refeed_fails;
  std::deque<Step> launched;
  int64_t fed_chunks = 0, max_launched = 0;
  std::vector<int64_t> fed_seqs;
};

struct Collected {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
  int events = 0;
};

inline EngineConfig Config(int64_t budget) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_waiting = 64;
  return c;
}

inline EngineRequest Request(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

inline std::vector<int32_t> Expected(const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<int32_t> out;
  int32_t last = prompt.back();
  for (int64_t i = 0; i < n; ++i) {
    last = NextToken(last, static_cast<int64_t>(prompt.size()) + i - 1);
    out.push_back(last);
    if (last == kEos) break;
  }
  return out;
}

// (Built with append: GCC 12 warns falsely on `"r" + std::to_string(i)`.)
inline std::string Name(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

inline std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 13 + seed * 7) % 40);
  return p;
}

inline void RunToCompletion(Engine& engine, int max_steps = 10000) {
  for (int i = 0; i < max_steps && engine.Step(); ++i) {
  }
}

inline Status Submit(Engine& engine, EngineRequest r, Collected& out) {
  return engine.Submit(std::move(r), [&out](const EngineEvent& ev) {
    ++out.events;
    out.tokens.insert(out.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) out.finish = ev.finish;
  });
}

}  // namespace peregrine::engine_testing
