// A CPU model split over several processes (tensor/expert parallel, one rank each). Rank 0
// runs the engine with a RankedHostModel: every call the runtime makes (KV pools, forward,
// tree commit, draft, page import) is first broadcast to the other ranks, which replay it on
// their own shard in RunHostRank, and then run here; the shards' collectives inside the
// forward keep every rank's KV state and logits identical. Host-only, no CUDA.
//
// A call that fails its own checks fails the same way on every rank (same inputs) and the
// group carries on; a failed collective (a rank died) breaks the group for good: health()
// reports it and every later call fails with it. Used from one thread (the runner's).
#pragma once

#include <memory>

#include "distributed/communicator.h"
#include "model/host_model.h"

namespace peregrine {

class RankedHostModel final : public HostModel {
 public:
  // `local` is rank 0's shard, made with `comm` (its rank 0), which the model keeps alive.
  RankedHostModel(std::unique_ptr<HostModel> local, std::unique_ptr<distributed::Communicator> comm);
  // Tells the other ranks to stop.
  ~RankedHostModel() override;

  const ModelConfig& config() const override { return local_->config(); }
  KvLayout kv_layout(int64_t block_tokens) const override { return local_->kv_layout(block_tokens); }
  std::unique_ptr<HostKvPools> CreateKvPools(int64_t block_tokens, int32_t num_slots, int32_t num_blocks,
                                             int32_t num_snapshots) const override;
  Status Forward(std::span<const ChunkView> chunks, HostKvPools& kv, std::vector<float>* logits) override;
  Status CommitTree(HostKvPools& kv, int32_t slot, std::span<const int32_t> blocks,
                    std::span<const int32_t> path) override;
  bool has_drafter() const override { return local_->has_drafter(); }
  Status Draft(HostKvPools& kv, std::span<const DraftInput> inputs,
               std::vector<std::vector<speculative::DepthCandidates>>* out) override;
  Status health() const override;

  struct Group;

 private:
  std::unique_ptr<HostModel> local_;
  std::shared_ptr<Group> group_;
};

// Ranks 1..N-1: replays rank 0's calls on `local` (this rank's shard, made with `comm`) until
// rank 0 stops the group (Ok) or the group breaks (the collective's error).
Status RunHostRank(HostModel& local, distributed::Communicator& comm);

}  // namespace peregrine
