// Engine: owns requests from submission to their last event and runs the step loop on its
// own thread. Every step reads schedule -> launch -> collect -> post-process -> emit.
//
// The runner says how many launched steps may wait (ModelRunner::max_in_flight): with one,
// each step is collected right after its launch; with two, the loop runs one step ahead: it
// plans and launches step n+1 while the device runs step n, then collects and
// post-processes step n. A sequence that sampled in step n takes part in step n+1 with its
// newest token still unknown on the host (Sequence::num_pending); the device reads it from
// the token its slot sampled. What the engine cannot know ahead is handled after the fact:
// - a sequence that finishes in step n (stop token, abort) has its step n+1 row dropped;
// - a sequence that reaches its length in step n is not planned into step n+1 at all;
// - a row the device could not sample (finished on the host) fed step n+1 a wrong token, so
//   that sequence drops its step n+1 row and restarts (recompute, as after a preemption);
// - sequences whose sampling counts their own tokens (penalties) need step n's token on the
//   host before step n+1's rows exist: such a step is collected before the next is planned
//   (so is one with a request still short of its min_tokens);
// - a grammar's mask for step n+1 depends on step n's token: the row is launched with its
//   mask deferred, and right after step n is collected (its tokens accepted by the
//   matchers) the engine computes the masks and hands them to the runner, whose sampling of
//   step n+1 waits for them behind its forward (ModelRunner::SupplyMasks). A runner that
//   cannot wait collects first, as for penalties.
// A request's tokens are therefore the same at any depth.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/engine_client.h"
#include "kv_cache/kv_manager.h"
#include "runtime/model_runner.h"
#include "scheduler/scheduler.h"

namespace peregrine {

struct EngineConfig {
  SchedulerConfig scheduler;
  std::string kv_cache_dtype = "bfloat16";  // reported in the stats (cache_config_info)
};

class Engine final : public EngineClient {
 public:
  // The KV bookkeeping follows the runner's pools (ModelRunner::kv_capacity).
  Engine(const EngineConfig& config, std::unique_ptr<ModelRunner> runner);
  ~Engine() override;

  // Starts the step-loop thread; Stop() aborts whatever is left and joins it.
  void Start();
  void Stop();

  Status Submit(EngineRequest request, EventSink sink) override;
  void Abort(const std::string& request_id) override;
  EngineStats Stats() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t max_context() const override { return max_context_; }
  std::vector<int32_t> eos_token_ids() const override { return eos_ids_; }
  std::string kv_fingerprint() const override { return runner_->kv_fingerprint(); }

  // One step on the calling thread (tests drive the engine this way without Start()).
  // Returns false when there was nothing to do.
  bool Step();

 private:
  struct Inbox {
    std::vector<std::unique_ptr<Sequence>> submitted;
    std::unordered_set<std::string> aborted;
  };

  // A launched, uncollected step: its plan and, per sampling row, the sequence.
  struct LaunchedRow {
    Sequence* seq = nullptr;
    bool discard = false;  // the sequence restarted: drop this row's sample
  };
  // A launched chunk that scores prompt tokens (its rows start at prompt position `first`).
  struct ScoredChunk {
    Sequence* seq = nullptr;
    int64_t first = 0;
  };
  struct LaunchedStep {
    SchedulerOutput plan;
    std::vector<LaunchedRow> rows;
    std::vector<ScoredChunk> scored;  // in chunk order, as the runner returns their scores
    std::vector<Sequence*> finishing;  // requests that generate nothing, done with this step
    std::vector<size_t> deferred;  // rows whose grammar masks are still to be supplied
    // Sequences that finished while this step (or an older one) still named them; they are
    // destroyed with it, after it has been collected.
    std::vector<std::unique_ptr<Sequence>> retired;
  };

  void TakeInbox();
  void Finish(Sequence* seq, FinishReason reason, const std::string& error = {});
  // Moves the collected prompt scores into the request's first event that can carry them.
  static void AttachPromptScores(Sequence* seq, EngineEvent* ev);
  // Appends a collected chunk's scores (dropping rows an earlier launch already scored).
  static void AddPromptScores(Sequence* seq, int64_t first, ChunkScores scores);
  // Takes a finished sequence out of the schedule and the live set; it is destroyed once no
  // launched step names it.
  void Close(Sequence* seq);
  // Records the sequence's new tokens (a sampled one, or accepted drafts and the token after
  // them) and emits them in one event, finishing the sequence at the first stop token, at its
  // length or when the grammar refuses one (tokens after that are dropped).
  void Emit(Sequence* seq, std::vector<SampleResult> samples, std::chrono::steady_clock::time_point now);
  // Disaggregation: hands a finishing request's prompt state to its export sink (or why not).
  void ExportKv(Sequence* seq);
  // Loads transferred states into slots, in arrival order while slots and blocks allow, and
  // emits each one's first token.
  void AdmitImports();
  void FailStep(const SchedulerOutput& out, const Status& status);
  // Launches the plan's step; false when it failed (its requests errored out).
  bool Launch(SchedulerOutput plan);
  // Collects the oldest launched step and post-processes its samples.
  void CollectOldest();
  // The grammar masks of `seqs` (null entries: none), in mask_words_, on the mask threads.
  std::vector<const uint32_t*> FillMasks(std::span<Sequence* const> seqs);
  // Computes and hands over the step's deferred masks (its older step has been collected).
  void SupplyMasks(LaunchedStep& step);
  // Feeds a collected token to the sequence's grammar; false when the grammar refuses it.
  bool AdvanceGrammar(Sequence* seq, int32_t token);
  // Drops the sequence's pending row in the newest launched step and recomputes it.
  void Restart(Sequence* seq);
  // Adds a launched step's tokens to the tokens-per-step histogram.
  void CountStepTokens(int64_t num_tokens);
  void UpdateStats();
  void Loop();

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  const int64_t vocab_size_;
  const int64_t max_context_;
  const std::vector<int32_t> eos_ids_;
  const size_t depth_;  // launched steps that may wait to be collected

  // Engine-thread state.
  KvManager kv_;
  Scheduler scheduler_;
  std::unordered_map<std::string, std::unique_ptr<Sequence>> live_;  // by request id
  std::deque<Sequence*> importing_;  // transferred states not loaded yet (AdmitImports)
  int64_t num_failed_imports_ = 0;
  int64_t num_recomputed_imports_ = 0;
  int64_t next_seq_id_ = 1;
  std::deque<LaunchedStep> launched_;  // oldest first
  std::vector<std::unique_ptr<Sequence>> graveyard_;  // finished with no launched step left; freed per Step
  std::vector<uint32_t> mask_words_;  // grammar masks being handed to the runner
  structured::MaskBatch mask_batch_;  // a step's masks, on a few threads
  StepTokenCounts step_tokens_;

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  Inbox inbox_;
  int64_t num_queued_ = 0;  // submitted, not finished (bounds the waiting queue)
  bool stopping_ = false;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace peregrine
