// How the router picks a worker for a request (a closed set, hence a variant): round robin,
// least load, or cache-aware (SGLang's router policy: prefix affinity while the workers' loads
// stay balanced, least load when they do not). Pure functions over a snapshot of the workers,
// unit-tested without sockets.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "base/status.h"

namespace peregrine::router {

struct RoundRobin {};
struct LeastLoad {};
struct CacheAware {
  double cache_threshold = 0.5;        // matched fraction of the prompt that makes a worker the pick
  int64_t balance_abs_threshold = 32;  // loads further apart than this (and than the ratio) ...
  double balance_rel_threshold = 1.5;  // ... send the request to the least loaded worker
};
using RoutingPolicy = std::variant<RoundRobin, LeastLoad, CacheAware>;

// A worker as the policy sees it for one request.
struct WorkerView {
  bool is_eligible = false;  // healthy and not yet tried for this request
  int64_t load = 0;          // requests the router has in flight there plus what it reports queued
  size_t matched_chunks = 0; // leading prompt chunks its prefix index holds (cache-aware)
};

// The worker to send to, or -1 when none is eligible. `turn` is a counter the caller advances
// per request (round robin; ties elsewhere go to the lowest index).
int ChooseWorker(const RoutingPolicy& policy, std::span<const WorkerView> workers, size_t prompt_chunks,
                 uint64_t turn);

// "round_robin", "least_load" (SGLang: "shortest_queue" too), "cache_aware".
Result<RoutingPolicy> ParseRoutingPolicy(std::string_view name);
std::string_view PolicyName(const RoutingPolicy& policy);

}  // namespace peregrine::router
