// Ranks as threads of one process on one GPU, for testing sharded CUDA models without
// several GPUs (NCCL refuses two ranks on one device). Each collective waits for the member's
// stream, stages its buffer through the host and meets the others at a barrier; every rank
// sums in rank order in f32 (bf16 and f32 buffers), so all get the same bits; all-gather and
// broadcast copy bytes (any dtype). Eager steps only: a host wait cannot be captured into a
// CUDA graph. A rank that does not arrive within 60 s breaks the group: every collective
// then fails (as NCCL's would be aborted), so a test fails instead of hanging.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "distributed/communicator.h"

namespace peregrine::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  int size() const { return size_; }
  // Rank `rank`'s communicator; the group outlives it. One thread per member.
  std::unique_ptr<distributed::Communicator> Member(int rank);

 private:
  friend class ThreadGroupMember;
  // Waits for every rank; false once the group is broken.
  bool Arrive();
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
  std::vector<const std::vector<uint8_t>*> staged_;  // each rank's buffer, as bytes
};

}  // namespace peregrine::testing
