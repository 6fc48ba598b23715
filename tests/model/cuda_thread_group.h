// Ranks as threads of one process on one GPU, for testing sharded CUDA models without
// several GPUs (NCCL refuses two ranks on one device). Each collective waits for the member's
// stream, stages its buffer through the host and meets the others at a barrier; every rank
// sums in rank order in f32 (bf16 and f32 buffers), so all get the same bits; all-gather and
// broadcast copy bytes (any dtype). Eager steps only: a host wait cannot be captured into a
// CUDA graph.
#pragma once

#include <barrier>
#include <cstdint>
#include <memory>
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
  int size_;
  std::barrier<> barrier_;
  std::vector<const std::vector<uint8_t>*> staged_;  // each rank's buffer, as bytes
};

}  // namespace peregrine::testing
