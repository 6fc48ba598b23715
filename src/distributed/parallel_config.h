// How a model is split over processes: tensor parallel (query heads, output-projection groups,
// shared-expert and dense intermediate, vocabulary) over `tp_size` ranks, the routed experts
// either split the same way (intermediate) or partitioned whole (expert parallel), and where
// the ranks meet. One process per rank; rank 0 serves.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace peregrine::distributed {

struct ParallelConfig {
  int tp_size = 1;             // --tp / --tensor-parallel-size
  bool expert_parallel = false;  // --ep N == --tp N: routed experts partitioned over the ranks
  int nnodes = 1;              // --nnodes
  int node_rank = 0;           // --node-rank
  std::string dist_init_addr;  // --dist-init-addr host:port (rank 0's rendezvous), empty: local
  // GPU ranks of one node sum small messages with the custom all-reduce over CUDA IPC
  // (distributed/ipc_all_reduce.h): opt-in (--enable-custom-all-reduce) until it has run on
  // two GPUs; off, every sum goes to NCCL.
  bool custom_all_reduce = false;
  int world_size() const { return tp_size; }
  int ranks_per_node() const { return tp_size / nnodes; }
  bool is_distributed() const { return tp_size > 1; }
};

// A half-open range [begin, end) of some dimension owned by one rank.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Rank `rank` of `size` owns part `rank` of `n` items split evenly (n % size == 0).
ShardRange EvenShard(int64_t n, int rank, int size);
// The same where n need not divide: every part ceil(n / size) long, the last ones shorter
// (possibly empty). The vocabulary is split this way.
ShardRange PaddedShard(int64_t n, int rank, int size);

// The flags' own consistency (sizes, node split, address form); the model checks its
// divisibility itself (what each dimension needs).
Status ValidateParallelConfig(const ParallelConfig& config);

// "host:port" -> its parts; InvalidArgument otherwise.
Status ParseHostPort(const std::string& address, std::string* host, int* port);

}  // namespace peregrine::distributed
