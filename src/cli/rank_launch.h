// The ranks of `peregrine serve --tp N`: one process per rank. The process the user starts on
// a node spawns that node's other ranks (copies of itself with a hidden --rank) and watches
// them; global rank 0 serves HTTP and runs the engine, every other rank replays rank 0's
// model calls on its shard (runtime/host_ranks.h) and exits when rank 0 stops.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cli/engine_factory.h"

namespace peregrine::cli {

class RankSupervisor {
 public:
  // Starts `argv` (this binary's own command line) once per rank in `ranks`, each with
  // `--rank R --dist-init-addr ADDRESS` appended (an earlier --dist-init-addr dropped).
  // `on_exit(rank, code)` runs on the supervisor's thread when a rank ends before Stop().
  static Result<std::unique_ptr<RankSupervisor>> Spawn(const std::vector<std::string>& argv,
                                                       const std::vector<int>& ranks, const std::string& address,
                                                       std::function<void(int rank, int code)> on_exit);
  // From now on a rank that ends is expected (rank 0 is about to tell them to stop).
  void ExpectExit() { stopping_ = true; }
  // Waits up to `grace_ms` for the ranks to end (rank 0 has told them to), then kills them.
  void Stop(int grace_ms = 10000);
  ~RankSupervisor();

 private:
  RankSupervisor() = default;
  void Watch();

  std::vector<pid_t> pids_;
  std::vector<int> ranks_;
  std::function<void(int, int)> on_exit_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Rank `rank` (> 0) of `options.parallel`: joins the group at the rendezvous, loads its shard
// and replays rank 0's calls. Returns the process's exit code (0 once rank 0 stopped the group).
int RunModelRank(const EngineOptions& options, int rank);

}  // namespace peregrine::cli
