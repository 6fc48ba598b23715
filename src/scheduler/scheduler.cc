#include "scheduler/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace peregrine {

Scheduler::Scheduler(const SchedulerConfig& config, KvManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add(Sequence* seq) { waiting_.push_back(seq); }

void Scheduler::remove(Sequence* seq) {
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  kv_.free(seq->id);
}

void Scheduler::requeue(Sequence* seq) {
  remove(seq);
  seq->num_computed = 0;
  waiting_.push_front(seq);
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput& out) {
  std::erase(running_, seq);
  kv_.free(seq->id);
  seq->num_computed = 0;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(seq);
  out.preempted.push_back(seq);
}

int64_t Scheduler::ChunkLength(const Sequence& seq, int64_t budget) const {
  const int64_t p0 = seq.num_computed;
  if (seq.scores_from(p0)) budget = std::min(budget, scored_rows_left_);
  const int64_t end = seq.num_tokens();
  int64_t e = p0 + std::min(end - p0, budget);
  const int64_t b = kv_.block_tokens();
  if (kv_.prefix_caching() && b > 0) {
    if (p0 % b != 0) {
      e = std::min(e, (p0 / b + 1) * b);
    } else if (e < end && e % b != 0 && e / b * b > p0) {
      e = e / b * b;
    }
  }
  return e - p0;
}

int32_t Scheduler::Lookahead(const Sequence& seq, bool is_decode) const {
  if (!seq.speculates || !is_decode) return 0;
  // The step samples one token and may accept `lookahead` more: none past max_tokens, and
  // their positions stay inside the context.
  int64_t room = seq.request.max_tokens - seq.num_generated - seq.num_pending - 1;
  if (config_.max_context > 0) room = std::min(room, config_.max_context - seq.num_computed - 1);
  return static_cast<int32_t>(std::clamp<int64_t>(room, 0, config_.speculative_lookahead));
}

void Scheduler::Plan(Sequence* seq, int64_t n, int32_t lookahead, SchedulerOutput& out) {
  ScheduledChunk c;
  c.seq = seq;
  c.first = seq->num_computed;
  c.num_tokens = n;
  c.samples = seq->num_computed + n == seq->num_tokens() && seq->request.max_tokens > 0;
  c.lookahead = seq->speculates ? lookahead : -1;
  if (seq->scores_from(c.first)) scored_rows_left_ -= n;
  kv_.append(seq->id, n + lookahead, &c.snapshots);
  c.restore = kv_.take_restore(seq->id);
  out.chunks.push_back(std::move(c));
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  scored_rows_left_ = config_.max_scored_rows;

  // Running sequences first, oldest first, decodes before prefill chunks (a long prompt in
  // prefill never stalls the running decodes); make room by preempting the newest.
  for (const bool decodes : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence* seq = running_[i];
      const bool is_decode = seq->num_uncomputed() == 1 && seq->num_computed > 0;
      int64_t cap = budget;
      if (!decodes && config_.long_prefill_token_threshold > 0 && !waiting_.empty())
        cap = std::min(cap, config_.long_prefill_token_threshold);
      const int64_t n = is_decode == decodes ? ChunkLength(*seq, cap) : 0;
      if (n <= 0) {
        ++i;
        continue;
      }
      const int32_t ahead = Lookahead(*seq, is_decode);
      while (!kv_.can_append(seq->id, n + ahead) && running_.back() != seq) {
        Sequence* victim = running_.back();
        std::erase_if(out.chunks, [&](const ScheduledChunk& c) { return c.seq == victim; });
        preempt(victim, out);
      }
      if (!kv_.can_append(seq->id, n + ahead)) {
        preempt(seq, out);  // the newest itself: nothing left to take from
        continue;
      }
      Plan(seq, n, ahead, out);
      budget -= n + (ahead > 0 ? config_.speculative_max_nodes : 0);
      ++i;
    }
  }

  // Then admit waiting sequences in arrival order (none past one whose token is pending).
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs &&
         kv_.can_admit()) {
    Sequence* seq = waiting_.front();
    if (seq->num_pending > 0) break;
    // A prompt still to be scored is computed whole: no prefix lookup (its blocks are still
    // committed for others to reuse).
    const bool scores = seq->scores_from(0);
    const int64_t hit = kv_.admit(seq->id, scores ? std::span<const int32_t>{} : std::span<const int32_t>(seq->tokens),
                                  seq->request.cache_salt);
    seq->num_computed = hit;
    const int64_t n = ChunkLength(*seq, budget);
    if (n <= 0 || !kv_.can_append(seq->id, n)) {
      kv_.free(seq->id);
      seq->num_computed = 0;
      break;  // keep arrival order: no smaller request jumps the queue
    }
    if (seq->num_cached_tokens < 0) seq->num_cached_tokens = std::min(hit, seq->num_prompt_tokens);
    if (kv_.prefix_caching() && !scores) {
      num_prefix_queries_ += static_cast<int64_t>(seq->tokens.size());
      num_prefix_hits_ += hit;
    }
    waiting_.pop_front();
    running_.push_back(seq);
    Plan(seq, n, 0, out);
    budget -= n;
  }
  return out;
}

void Scheduler::on_accepted(Sequence* seq, int64_t num_accepted) {
  seq->num_computed += num_accepted;
  if (kv_.holds(seq->id)) kv_.truncate(seq->id, seq->num_computed);
}

void Scheduler::on_computed(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    c.seq->num_computed = c.first + c.num_tokens;
    kv_.commit(c.seq->id, c.seq->tokens);
  }
}

}  // namespace peregrine
