// ModelRunner on the CPU reference backend, for any HostModel: the KV pools are the model's
// host pools sized by the runtime, every step is one batched forward (each sequence's logits depend on its own
// tokens only: batch-invariant) and sampling runs on the host inside Launch, so the token
// buffer holds every slot's newest token before the next step is planned.
#pragma once

#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "model/host_model.h"
#include "runtime/kv_sizing.h"
#include "runtime/model_runner.h"
#include "speculative/draft_tree.h"
#include "speculative/speculative_config.h"

namespace peregrine {

struct CpuRunnerOptions {
  int32_t num_slots = 64;
  int64_t kv_tokens = 1 << 18;       // tokens of context the blocks hold
  int64_t block_tokens = 256;
  bool prefix_caching = true;
  double snapshot_fraction = 0.1;
  int64_t max_context = 0;           // 0: the model's max_position_embeddings
  // Let two launched steps wait (the engine then plans a step before collecting the last);
  // steps still complete inside Launch, so this only exercises the overlapped engine path.
  bool overlap = false;
  // Prompt-logprob rows per step (each holds a [vocab] row of logits on the host).
  int64_t max_scored_rows = 512;
  // Speculative decoding with the model's drafter (HostModel::has_drafter).
  speculative::SpeculativeConfig speculative;
};

class CpuModelRunner final : public ModelRunner {
 public:
  // Speculation needs a model with a drafter (InvalidArgument otherwise, and for a bad config).
  static Result<std::unique_ptr<CpuModelRunner>> Create(std::unique_ptr<HostModel> model,
                                                        const CpuRunnerOptions& options);
  CpuModelRunner(std::unique_ptr<HostModel> model, const CpuRunnerOptions& options);

  int max_in_flight() const override { return options_.overlap ? 2 : 1; }
  Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) override;
  Status Collect(std::span<const uint8_t> skip, CollectedStep* out) override;
  // Deferred rows keep their logits until their mask arrives, then sample.
  Status SupplyMasks(std::span<const uint32_t* const> masks) override;
  bool defers_masks() const override { return true; }
  KvCapacity kv_capacity() const override { return capacity_; }
  int64_t max_scored_rows() const override { return options_.max_scored_rows; }
  int32_t speculative_lookahead() const override { return options_.speculative.lookahead(); }
  int32_t speculative_max_nodes() const override { return options_.speculative.max_nodes(); }
  SpeculativeCounts speculative_counts() const override { return spec_counts_; }
  Status ExportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                  TransferredKv* kv) override;
  Status ImportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                  const TransferredKv& kv) override;
  std::string kv_fingerprint() const override;
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  Status health() const override { return model_->health(); }
  int64_t max_context() const override { return max_context_; }
  std::vector<int32_t> eos_token_ids() const override;

  HostKvPools& kv() { return *kv_; }

 private:
  struct Launched {
    std::vector<SampleResult> results;
    std::vector<std::vector<SampleResult>> drafts;  // per row: accepted draft tokens
    std::vector<std::mt19937_64> rng_before;
    std::vector<SequenceSamplingState*> states;
    // Rows waiting for SupplyMasks: their index, slot, params and logits.
    std::vector<size_t> deferred;
    std::vector<int32_t> deferred_slots;
    std::vector<const SamplingParams*> deferred_params;
    std::vector<float> deferred_logits;
    std::vector<ChunkScores> scores;  // per scored chunk
  };

  std::unique_ptr<HostModel> model_;
  CpuRunnerOptions options_;
  int64_t max_context_;
  KvCapacity capacity_;
  std::unique_ptr<HostKvPools> kv_;
  std::vector<int64_t> slot_positions_;  // [num_slots] next position of the slot's state, -1 unusable
  std::vector<int32_t> slot_tokens_;     // [num_slots] the token each slot sampled last
  std::deque<Launched> launched_;
  // The drafter's candidates for the slot's next verify, made when its newest token (at
  // `position`) was sampled; the sequence the drafter follows in each slot.
  struct SlotDraft {
    int64_t position = -1;
    std::vector<speculative::DepthCandidates> candidates;
  };
  std::vector<SlotDraft> slot_drafts_;
  std::vector<int64_t> drafter_seq_;
  SpeculativeCounts spec_counts_;
};

}  // namespace peregrine
