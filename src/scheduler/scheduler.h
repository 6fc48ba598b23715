// Continuous batching with chunked prefill and preemption by recompute (host only).
//
// Each step has a token budget. Running sequences are served first, in admission order
// (a decode takes one token, an unfinished prefill takes a chunk); then waiting sequences
// are admitted in arrival order while the budget, the running cap and the KV cache allow.
// When a running sequence cannot get KV pages for its next tokens, the most recently
// admitted running sequence is preempted: its KV is freed and it returns to the front of
// the waiting queue, to be recomputed from its tokens (prompt + generated) later.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kv_cache/kv_manager.h"
#include "scheduler/sequence.h"

namespace peregrine {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // token budget per step
  int64_t max_num_seqs = 64;              // running sequences at most
  int64_t max_num_waiting = 1024;         // bounded waiting queue (enforced at submission)
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t first = 0;        // == seq->num_computed when scheduled
  int64_t num_tokens = 0;
  bool samples = false;     // the chunk reaches the end of the sequence's tokens
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // the runner must drop their state
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvManager& kv);

  // The engine bounds the waiting queue (max_num_waiting) before a sequence gets here.
  void add(Sequence* seq);
  // Removes the sequence wherever it is and frees its KV.
  void remove(Sequence* seq);
  // Frees the sequence's KV and puts it at the front of the waiting queue, to be recomputed
  // from its tokens (as a preemption does, without counting one).
  void requeue(Sequence* seq);

  SchedulerOutput schedule();
  // Marks a step's chunks as computed (after the runner succeeded).
  void on_computed(const SchedulerOutput& out);

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  void preempt(Sequence* seq, SchedulerOutput& out);

  SchedulerConfig config_;
  KvManager& kv_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;
  int64_t num_preemptions_ = 0;
};

}  // namespace peregrine
