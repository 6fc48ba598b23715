// The router's workers and what it knows of them: health (from /health checks and from
// requests that could not reach them), load (its own requests in flight plus the queue the
// worker's /metrics reports), a prefix index per worker (cache-aware routing) and the
// counters of the router's /metrics. Thread-safe: the connections and the health checks on
// every router thread share one pool.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "router/prefix_index.h"
#include "router/routing_policy.h"

namespace peregrine::router {

class WorkerPool {
 public:
  // `names` are the workers' URLs as given (metric labels). Every worker starts healthy.
  WorkerPool(std::vector<std::string> names, RoutingPolicy policy, size_t prefix_keys_per_worker,
             int unhealthy_after);

  size_t size() const { return workers_.size(); }
  const std::string& name(size_t i) const { return workers_[i].name; }

  // Picks a healthy worker not in `tried` for a prompt with these prefix keys and counts the
  // request in flight there; -1 when none is left.
  int Acquire(const std::vector<uint64_t>& keys, std::span<const int> tried);
  // The request at worker i is over: `status` is the HTTP status relayed (0: the worker could
  // not be reached or failed before answering). Served requests add their prompt's keys to
  // the worker's index; unreachable ones count toward its ejection.
  void Release(int i, int status, const std::vector<uint64_t>& keys);
  void CountRetry();
  void CountUnroutable();
  // A health check's outcome (queued: the worker's running + waiting requests, when read).
  void ReportHealth(int i, bool ok, std::optional<int64_t> queued);
  bool any_healthy() const;

  // Prometheus exposition of the router's metrics under `prefix` ("peregrine").
  std::string RenderMetrics(std::string_view prefix) const;

 private:
  struct Worker {
    std::string name;
    bool is_healthy = true;
    int consecutive_failures = 0;
    int64_t in_flight = 0;
    int64_t queued = 0;
    PrefixIndex prefixes;
    std::vector<std::pair<int, int64_t>> responses;  // (status, count); status 0: unreachable
    int64_t ejections = 0;
  };
  void Fail(Worker& w);

  mutable std::mutex mu_;
  RoutingPolicy policy_;
  int unhealthy_after_;
  uint64_t turn_ = 0;
  int64_t retries_ = 0;
  int64_t unroutable_ = 0;
  std::vector<Worker> workers_;
};

}  // namespace peregrine::router
