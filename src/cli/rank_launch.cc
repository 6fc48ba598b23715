#include "cli/rank_launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "base/log.h"
#include "distributed/communicator.h"
#include "runtime/host_ranks.h"

extern char** environ;

namespace peregrine::cli {

Result<std::unique_ptr<RankSupervisor>> RankSupervisor::Spawn(const std::vector<std::string>& argv,
                                                              const std::vector<int>& ranks,
                                                              const std::string& address,
                                                              std::function<void(int, int)> on_exit) {
  std::unique_ptr<RankSupervisor> s(new RankSupervisor());
  s->on_exit_ = std::move(on_exit);
  std::vector<std::string> base;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--dist-init-addr" || argv[i] == "--rank") {
      ++i;  // its value
      continue;
    }
    if (argv[i].rfind("--dist-init-addr=", 0) == 0 || argv[i].rfind("--rank=", 0) == 0) continue;
    base.push_back(argv[i]);
  }
  for (int rank : ranks) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--rank", std::to_string(rank), "--dist-init-addr", address});
    std::vector<char*> c_args;
    for (std::string& a : args) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, c_args.data(), environ);
    if (rc != 0) {
      s->Stop(0);
      return Unavailable("cannot start rank " + std::to_string(rank) + ": " + std::strerror(rc));
    }
    s->pids_.push_back(pid);
    s->ranks_.push_back(rank);
  }
  s->thread_ = std::thread([p = s.get()] { p->Watch(); });
  return s;
}

void RankSupervisor::Watch() {
  size_t left = pids_.size();
  std::vector<bool> done(pids_.size(), false);
  while (left > 0) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(pids_[i], &status, WNOHANG) != pids_[i]) continue;
      done[i] = true;
      --left;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      if (!stopping_) {
        LogError("rank {} ended (exit code {}) while serving", ranks_[i], code);
        if (on_exit_) on_exit_(ranks_[i], code);
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void RankSupervisor::Stop(int grace_ms) {
  stopping_ = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (pid_t pid : pids_) {
    // The watcher reaps them; a rank still alive after the grace period is killed.
    while (kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(pid, SIGKILL);
  }
  if (thread_.joinable()) thread_.join();
}

RankSupervisor::~RankSupervisor() { Stop(); }

int RunModelRank(const EngineOptions& o, int rank) {
  if (o.device == "cuda") {
    const Status s = RunCudaRank(o, rank);
    if (!s.ok()) {
      LogError("rank {}: {}", rank, s.ToString());
      return 1;
    }
    return 0;
  }
  Result<ModelSource> source = OpenModel(o);
  if (!source.ok()) {
    LogError("rank {}: {}", rank, source.status().ToString());
    return 1;
  }
  distributed::Rendezvous r;
  r.host = o.rendezvous_host;
  r.port = o.rendezvous_port;
  r.rank = rank;
  r.size = o.parallel.world_size();
  auto comm = distributed::CreateGlooCommunicator(r);
  if (!comm.ok()) {
    LogError("rank {}: {}", rank, comm.status().ToString());
    return 1;
  }
  auto model = MakeHostModel(o, std::move(*source), comm->get());
  if (!model.ok()) {
    LogError("rank {}: {}", rank, model.status().ToString());
    return 1;
  }
  LogInfo("rank {} of {}: holding its shard", rank, r.size);
  const Status s = RunHostRank(**model, **comm);
  if (!s.ok()) {
    LogError("rank {}: {}", rank, s.ToString());
    return 1;
  }
  return 0;
}

}  // namespace peregrine::cli
