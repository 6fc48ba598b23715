// Engine: owns requests from submission to their last event and runs the step loop on its
// own thread: schedule -> run -> sample -> post-process -> emit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
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
  KvCacheConfig kv_cache;
};

class Engine final : public EngineClient {
 public:
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

  // One step on the calling thread (tests drive the engine this way without Start()).
  // Returns false when there was nothing to do.
  bool Step();

 private:
  struct Inbox {
    std::vector<std::unique_ptr<Sequence>> submitted;
    std::unordered_set<std::string> aborted;
  };

  void TakeInbox();
  void Finish(Sequence* seq, FinishReason reason, const std::string& error = {});
  void FailStep(const SchedulerOutput& out, const Status& status);
  // Runs the step's chunks and samples one token per chunk that samples, on the device when
  // the runner can, else with Sample() on the host logits.
  Status RunAndSample(const SchedulerOutput& plan, std::span<const RunnerChunk> chunks,
                      std::vector<SampleResult>* samples);
  void UpdateStats();
  void Loop();

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  const int64_t vocab_size_;
  const int64_t max_context_;
  const std::vector<int32_t> eos_ids_;

  // Engine-thread state.
  KvManager kv_;
  Scheduler scheduler_;
  std::unordered_map<std::string, std::unique_ptr<Sequence>> live_;  // by request id
  int64_t next_seq_id_ = 1;

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
