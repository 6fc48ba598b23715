// ModelRunner on the CUDA backend: the engine's steps run on one GPU through a
// DeviceExecutor (any registered device model; the executor owns the KV pools, graphs and
// staging).
//
// With device sampling the runner can overlap steps: Launch enqueues a step (forward,
// sampling, the sampled tokens into the slots' token buffer, result copies into pinned host
// memory, an event) and returns; Collect waits for the oldest launched step's event. Two
// launch slots alternate, each with its own sampling buffers, so step n+1 can be launched,
// and read step n's sampled tokens on the device, before the host has collected step n.
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/ops/kv_copy.h"
#include "backend/cuda/stream.h"
#include "sampling/device_rows.h"

#include "runtime/cuda_kv_staging.h"
#include "runtime/device_executor.h"
#include "runtime/device_scorer.h"
#include "runtime/model_runner.h"
#include "speculative/draft_tree.h"
#include "speculative/speculative_config.h"
#include "scheduler/engine_request.h"

namespace peregrine {

class CudaModelRunner final : public ModelRunner {
 public:
  // `device_sampling`: sample on the GPU (kernels/sampling.cuh), so only token ids cross to
  // the host; otherwise the logits are copied and sampled on the host. `overlap` (needs
  // device sampling): let the engine launch step n+1 before collecting step n.
  // `speculative` (with device sampling): a speculating row's chunk becomes a draft tree (a
  // chain for ngram and mtp) verified in the step (model/deepseek_v4/step_plan.h), its nodes
  // sampled on the device with the draws sequential decoding would make, the accepted root
  // path kept by DeviceExecutor::CommitTrees in Collect; steps then do not overlap (the next
  // step's positions depend on what was accepted).
  CudaModelRunner(std::unique_ptr<DeviceExecutor> executor, bool device_sampling, bool overlap = true,
                  const speculative::SpeculativeConfig& speculative = {});
  ~CudaModelRunner() override;
  // The options the executor needs for `speculative` on `num_slots` slots: verify rows.
  static int64_t VerifyRows(const speculative::SpeculativeConfig& speculative, int64_t num_slots);

  int max_in_flight() const override { return device_sampling_ && overlap_ && !speculative_.enabled() ? 2 : 1; }
  int32_t speculative_lookahead() const override { return speculative_.lookahead(); }
  int32_t speculative_max_nodes() const override { return speculative_.max_nodes(); }
  SpeculativeCounts speculative_counts() const override { return spec_counts_; }
  // Fails (Internal) when a chunk continues a slot at another position than where its
  // state stands: the engine and the device state disagree.
  Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) override;
  Status Collect(std::span<const uint8_t> skip, CollectedStep* out) override;
  // Writes the deferred masks into the newest step's staging and opens its gate: that step's
  // sampling waits on the device behind its forward until then.
  Status SupplyMasks(std::span<const uint32_t* const> masks) override;
  bool defers_masks() const override { return device_sampling_; }
  KvCapacity kv_capacity() const override { return executor_->kv_capacity(); }
  // The executor's logits rows beyond one per slot (and the verify nodes).
  int64_t max_scored_rows() const override {
    const int64_t slots = executor_->options().num_slots;
    return std::max<int64_t>(
        executor_->options().max_logit_rows - std::max(slots, VerifyRows(speculative_, slots)), 0);
  }
  DeviceTime device_time() const override { return device_time_; }
  RunnerHostTime host_time() const override { return host_time_; }
  void NoteIdle() override { idle_since_collect_ = true; }
  // Disaggregation (cuda_kv_transfer.cc): pages in the device's own formats (bf16 rings and
  // entries, f32 compressor rings).
  Status ExportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                  TransferredKv* kv) override;
  Status ImportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                  const TransferredKv& kv) override;
  std::string kv_fingerprint() const override;
  // Exports go to this device arena (shared over CUDA IPC) instead of host memory; a request
  // whose pages do not fit in it goes through host memory.
  void SetKvStaging(std::shared_ptr<KvStagingArena> staging) { kv_staging_ = std::move(staging); }
  int64_t vocab_size() const override { return executor_->config().vocab_size; }
  int64_t max_context() const override { return executor_->options().max_context; }
  std::vector<int32_t> eos_token_ids() const override;

  DeviceExecutor& executor() { return *executor_; }

 private:
  // One launched step's sampling: its rows, the RNG of each row before its draw, pinned
  // staging for the uploads and the results, device buffers, and the event behind its copies.
  struct LaunchSlot {
    DeviceSamplingBatch batch;
    std::vector<std::mt19937_64> rng_before;
    std::vector<RunnerSampling> sampling;
    std::vector<int32_t> slots;  // the chunks' state slots (marked unusable if the step fails)
    // Speculative verify: per engine sampling row, its first device row and node count (1 for
    // a plain row), the tree it verifies (else empty) and where it starts.
    std::vector<size_t> first_row, num_nodes;
    std::vector<int32_t> row_slots;
    std::vector<speculative::DraftTree> trees;
    std::vector<int64_t> first_positions;
    bool verifies = false;
    // What the device drafter follows after the step: per chunk (step order) its sequence,
    // first position and step row, the tokens it ran, its lookahead and its sampling row.
    struct ChunkRecord {
      int64_t seq_id = 0;
      int32_t slot = 0;
      int64_t first_position = 0;
      int64_t first_row = 0;
      std::vector<int32_t> tokens;
      int32_t lookahead = -1;
      int64_t sampling_row = -1;
      bool restarts = false;
    };
    std::vector<ChunkRecord> records;
    std::vector<SampleResult> host_results;  // host sampling: the step's results
    std::vector<ChunkScores> host_scores;    // host sampling: the step's prompt scores
    // Prompt logprobs: the logits row of each sampling row (the scored chunks' rows come
    // first in their chunks), and the device scoring of the step's scored rows.
    std::vector<int32_t> sample_rows;
    bool compacts = false;  // some sampling row is not at its own index
    DeviceScorer scorer;
    size_t rows = 0, edits = 0;
    size_t row_capacity = 0, edit_capacity = 0;
    peregrine::cuda::PinnedHostBuffer in_rows, in_offsets, in_edits;
    peregrine::cuda::PinnedHostBuffer out_tokens, out_logprobs, out_status, out_top_tokens, out_top_logprobs,
        out_edit_raw;
    peregrine::cuda::DeviceBuffer rows_d, offsets_d, edits_d, edit_raw_d, tokens_d, logprobs_d, top_tokens_d,
        top_logprobs_d, status_d, saved_logits_d;
    peregrine::cuda::Event done;
    size_t timing = 0;  // its events in the timing ring
    // Grammar masks: per row its mask in masks_h (or -1), the masks, and the deferred rows
    // (row, mask) the device waits for behind `gate` (opened to gate_value by SupplyMasks).
    size_t masks = 0, mask_capacity = 0;
    std::vector<std::pair<size_t, int32_t>> deferred;
    peregrine::cuda::PinnedHostBuffer row_mask_h, masks_h;
    peregrine::cuda::DeviceBuffer row_mask_d, masks_d;
    peregrine::cuda::HostGate gate;
    uint32_t gate_value = 0;
  };

  // Checks that each chunk continues its slot (or restarts it) and collects the views.
  Status PlanChunks(std::span<const RunnerChunk> chunks);
  // Records where each slot's state stands after a step is enqueued (or that it is unusable).
  void Advance(std::span<const RunnerChunk> chunks, const Status& status);
  // Grows a slot's buffers (only while no launched step uses them).
  Status EnsureCapacity(LaunchSlot& slot, size_t rows, size_t edits);
  // Stages the rows' grammar masks (ready ones copied now, deferred ones reserved).
  Status StageMasks(LaunchSlot& slot, std::span<const RunnerSampling> sampling);
  // Opens a slot's gate with whatever it holds (a failed launch, or a collect without masks).
  void ReleaseGate(LaunchSlot& slot);
  // The step's sampling, enqueued behind its logits.
  Status EnqueueSampling(LaunchSlot& slot, const Tensor& logits, cudaStream_t stream);
  // Host sampling: the step runs to completion, its logits sampled by Sample().
  Status LaunchHostSampled(LaunchSlot& slot, std::span<const RunnerChunk> chunks,
                           std::span<const RunnerSampling> sampling);
  // The step's logits rows per chunk: its sampling rows and its scored chunks (`slot.scorer`).
  Status PlanRows(LaunchSlot& slot, std::span<const RunnerChunk> chunks, size_t num_sampling);
  // Scores the step's rows and moves the sampling rows to the front of `logits`.
  Status EnqueueScoring(LaunchSlot& slot, const Tensor& logits, cudaStream_t stream, Tensor* sampled);

  // Whether speculating rows verify DDTree trees built from the drafter's candidates (with one
  // candidate per depth DDTree is the chain, and the drafter returns no candidates).
  bool DraftsTrees() const {
    return speculative_.algorithm == speculative::Algorithm::kDdtree && speculative_.candidates() > 1;
  }
  // Speculative verify: turns speculating rows' chunks in step_ into draft trees and plans
  // the slot's per-row bookkeeping (Launch, before the device rows are appended).
  void PlanVerify(LaunchSlot& slot, std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling);
  // After Collect's commits: the device drafter (--speculative-algorithm mtp|ddtree) follows
  // every speculating chunk over its committed rows and drafts the next chains (and, for
  // ddtree, each depth's candidates).
  Status FollowDrafter(LaunchSlot& slot, std::span<const uint8_t> skip, std::span<const SampleResult> results,
                       std::span<const TreeCommit> commits);
  // Device row d's result (finished on the host from `state` where the device gave it up);
  // `state`, when given, records its token, as Sample() does.
  Status ReadDeviceRow(LaunchSlot& slot, size_t d, const SamplingParams& params, SequenceSamplingState* state,
                       SampleResult* out);
  // Collect of a verified row: acceptance, the results, the state, the counts.
  Status AcceptTree(LaunchSlot& slot, size_t row, bool skipped, SampleResult* result,
                     std::vector<SampleResult>* drafts, TreeCommit* commit);

  std::unique_ptr<DeviceExecutor> executor_;
  bool device_sampling_ = false;
  bool overlap_ = true;
  speculative::SpeculativeConfig speculative_;
  SpeculativeCounts spec_counts_;
  // The device drafter per slot: which sequence it follows, the positions it has paired
  // ([.., paired_end)), whether the row at paired_end waits on the device for its successor,
  // and the drafts it proposed after the token at drafts_at.
  struct SlotDrafter {
    int64_t seq_id = -1;
    int64_t paired_end = -1;
    bool pending = false;
    int64_t drafts_at = -1;
    std::vector<int32_t> drafts;
    // DDTree: each depth's candidates (the greedy chain's top-k), drafts.size() of them.
    std::vector<speculative::DepthCandidates> candidates;
  };
  std::vector<SlotDrafter> drafters_;
  // Per step chunk (step_ order) the tree built for it (empty: none) and its snapshots.
  std::vector<speculative::DraftTree> step_trees_;
  std::vector<std::vector<int32_t>> step_snapshots_;
  std::vector<int64_t> slot_positions_;  // [num_slots] next position of the slot's state, -1 unusable
  std::vector<ChunkView> step_;
  std::array<LaunchSlot, 2> launch_slots_;
  std::deque<int> launched_;  // launch slots of the launched, uncollected steps, oldest first
  int last_launched_ = -1;    // the slot of the newest launched step
  // Step timing: a start and an end event per launch, in a ring longer than the launches
  // alive at once (two launched + the last collected), so the last collected step's end
  // event is still valid when the next step is collected.
  std::array<peregrine::cuda::Event, 4> step_start_, step_end_;
  size_t num_launches_ = 0;
  int64_t last_timing_ = -1;  // ring entry of the last collected step
  bool idle_since_collect_ = false;
  DeviceTime device_time_;
  RunnerHostTime host_time_;
  // Speculative work between steps (commits, the drafter): its device time, timed with a
  // pair of events per Collect, is taken out of the next gap idle_s would count.
  peregrine::cuda::Event spec_start_, spec_end_;
  float spec_gap_ms_ = 0.0f;
  // Disaggregation over CUDA IPC (cuda_kv_transfer.cc): the export arena, the peers' arenas
  // this process opened (by handle), the copy kernel's buffers and the export stream.
  std::shared_ptr<KvStagingArena> kv_staging_;
  struct KvPeer {
    void* base = nullptr;   // this process's mapping of a prefill server's arena
    uint64_t bytes = 0;     // its size, from the driver
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxKvPeers = 8;
  std::map<std::string, KvPeer> kv_peers_;  // by handle bytes
  uint64_t kv_peer_uses_ = 0;
  peregrine::cuda::DeviceBuffer kv_segments_d_, kv_checksums_d_;
  peregrine::cuda::Stream kv_stream_;
  // Where each page of a slot and its blocks lies in the pools (the slot's page, then one per block).
  Status PageRegions(int32_t slot, std::span<const int32_t> blocks, std::vector<std::vector<DeviceRegion>>* where) const;
  Status CopyKvPages(std::span<const peregrine::cuda::KvCopyRange> ranges, size_t num_pages, cudaStream_t stream,
                     std::vector<uint64_t>* checksums);
  Status ExportKvToStaging(const std::vector<std::vector<DeviceRegion>>& where, TransferredKv* kv);
  Status ImportKvFromPeer(const std::vector<std::vector<DeviceRegion>>& where, const DeviceKvPages& pages);
  void CloseKvPeers();
};

}  // namespace peregrine
