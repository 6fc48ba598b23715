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

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // Running sequences first, oldest first; make room by preempting the newest.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t n = std::min(seq->num_uncomputed(), budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    while (!kv_.can_append(seq->id, n) && running_.back() != seq) {
      Sequence* victim = running_.back();
      std::erase_if(out.chunks, [&](const ScheduledChunk& c) { return c.seq == victim; });
      preempt(victim, out);
    }
    if (!kv_.can_append(seq->id, n)) {
      preempt(seq, out);  // the newest itself: nothing left to take from
      continue;
    }
    kv_.append(seq->id, n);
    out.chunks.push_back({seq, seq->num_computed, n, seq->num_computed + n == static_cast<int64_t>(seq->tokens.size())});
    budget -= n;
    ++i;
  }

  // Then admit waiting sequences in arrival order.
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs &&
         kv_.can_admit()) {
    Sequence* seq = waiting_.front();
    const int64_t n = std::min(seq->num_uncomputed(), budget);
    kv_.admit(seq->id);
    if (!kv_.can_append(seq->id, n)) {
      kv_.free(seq->id);
      break;  // keep arrival order: no smaller request jumps the queue
    }
    kv_.append(seq->id, n);
    waiting_.pop_front();
    running_.push_back(seq);
    out.chunks.push_back({seq, seq->num_computed, n, seq->num_computed + n == static_cast<int64_t>(seq->tokens.size())});
    budget -= n;
  }
  return out;
}

void Scheduler::on_computed(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) c.seq->num_computed = c.first + c.num_tokens;
}

}  // namespace peregrine
