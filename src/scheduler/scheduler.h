// Continuous batching with chunked prefill, prefix reuse and preemption by recompute (host
// only).
//
// Each step has a token budget. Running sequences are served first, in admission order, their
// decodes (one token each) before their prefill chunks; then waiting sequences
// are admitted in arrival order while the budget, the running cap and the KV cache allow.
// Admission starts a sequence from the longest prefix the KV cache holds for its tokens.
// When a running sequence cannot get KV blocks for its next tokens, the most recently
// admitted running sequence is preempted: its KV is freed and it returns to the front of
// the waiting queue, to be recomputed from its tokens (prompt + generated) later, from
// whatever of them the prefix cache still holds.
//
// With prefix caching, chunks respect block boundaries so that every boundary a chunk
// passes can be snapshotted: a chunk that starts inside a block ends at that block's end at
// the latest, and a chunk that starts on a boundary and stops before the sequence's end
// stops on a boundary when it passes one.
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
  // > 0: a prefill chunk takes at most this many tokens while requests wait, so a long prompt
  // leaves budget to admit them (vLLM's long_prefill_token_threshold); 0: no cap.
  int64_t long_prefill_token_threshold = 0;
  // Rows of prompt-logprob chunks per step (ModelRunner::max_scored_rows); a scoring chunk
  // takes one per token.
  int64_t max_scored_rows = 0;
  // Speculative decoding (ModelRunner::speculative_lookahead / _max_nodes): a decode of a
  // speculating sequence reserves KV for up to `speculative_lookahead` draft positions after
  // its token (never past its max_tokens or max_context) and takes
  // `speculative_max_nodes` more tokens of the step's budget.
  int32_t speculative_lookahead = 0;
  int32_t speculative_max_nodes = 0;
  int64_t max_context = 0;  // positions a sequence may reach (0: unbounded)
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t first = 0;        // == seq->num_computed when scheduled
  int64_t num_tokens = 0;
  bool samples = false;     // the chunk reaches the end of the sequence's tokens (and it generates)
  int32_t restore = -1;     // the slot starts from this snapshot (first chunk after a prefix hit)
  std::vector<int32_t> snapshots;  // per block boundary the chunk reaches: snapshot to write, or -1
  // Speculating sequences: draft positions reserved after the chunk (RunnerChunk::lookahead);
  // -1 for sequences that do not speculate.
  int32_t lookahead = -1;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // their KV is freed
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

  // A sequence waiting for a token a launched step still samples is not admitted until the
  // token is known.
  SchedulerOutput schedule();
  // Marks a step's chunks as computed (after the runner launched it) and commits their KV.
  void on_computed(const SchedulerOutput& out);
  // A speculative row was collected: its accepted drafts are computed too, and the KV
  // reserved for the rejected ones goes back.
  void on_accepted(Sequence* seq, int64_t num_accepted);

  // Plans nothing more for the sequence but leaves its KV held (until remove).
  void retire(Sequence* seq) {
    std::erase(running_, seq);
    std::erase(waiting_, seq);
  }
  bool can_run_more() const { return static_cast<int64_t>(running_.size()) < config_.max_num_seqs; }
  // Runs a sequence whose KV was loaded outside a step (a transferred state): it holds its
  // slot and blocks, and num_computed says how far.
  void add_running(Sequence* seq) { running_.push_back(seq); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prefix cache lookups of admitted sequences, in tokens (vLLM's queries and hits).
  int64_t num_prefix_query_tokens() const { return num_prefix_queries_; }
  int64_t num_prefix_hit_tokens() const { return num_prefix_hits_; }

 private:
  void preempt(Sequence* seq, SchedulerOutput& out);
  // Tokens of the sequence's next chunk within `budget` (block-aligned with prefix caching),
  // and within the step's scored rows left when it scores.
  int64_t ChunkLength(const Sequence& seq, int64_t budget) const;
  // Draft positions a decode of `seq` may reserve now (0 for prefill or no speculation).
  int32_t Lookahead(const Sequence& seq, bool is_decode) const;
  void Plan(Sequence* seq, int64_t n, int32_t lookahead, SchedulerOutput& out);

  SchedulerConfig config_;
  KvManager& kv_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;
  int64_t num_preemptions_ = 0;
  int64_t num_prefix_queries_ = 0;
  int64_t num_prefix_hits_ = 0;
  int64_t scored_rows_left_ = 0;  // in the step being planned
};

}  // namespace peregrine
