#include "router/routing_policy.h"

#include <algorithm>
#include <limits>

namespace peregrine::router {

namespace {

int LeastLoaded(std::span<const WorkerView> w) {
  int best = -1;
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i].is_eligible && (best < 0 || w[i].load < w[static_cast<size_t>(best)].load)) best = static_cast<int>(i);
  return best;
}

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

int ChooseWorker(const RoutingPolicy& policy, std::span<const WorkerView> workers, size_t prompt_chunks,
                 uint64_t turn) {
  return std::visit(
      Overloaded{
          [&](const RoundRobin&) {
            const size_t n = workers.size();
            for (size_t k = 0; k < n; ++k) {
              const size_t i = (turn + k) % n;
              if (workers[i].is_eligible) return static_cast<int>(i);
            }
            return -1;
          },
          [&](const LeastLoad&) { return LeastLoaded(workers); },
          [&](const CacheAware& c) {
            const int least = LeastLoaded(workers);
            if (least < 0) return -1;
            int64_t max_load = 0;
            for (const WorkerView& w : workers)
              if (w.is_eligible) max_load = std::max(max_load, w.load);
            const int64_t min_load = workers[static_cast<size_t>(least)].load;
            const bool imbalanced = max_load - min_load > c.balance_abs_threshold &&
                                    static_cast<double>(max_load) > c.balance_rel_threshold * static_cast<double>(min_load);
            if (imbalanced || prompt_chunks == 0) return least;
            int best = -1;
            for (size_t i = 0; i < workers.size(); ++i) {
              if (!workers[i].is_eligible) continue;
              if (best < 0 || workers[i].matched_chunks > workers[static_cast<size_t>(best)].matched_chunks ||
                  (workers[i].matched_chunks == workers[static_cast<size_t>(best)].matched_chunks &&
                   workers[i].load < workers[static_cast<size_t>(best)].load))
                best = static_cast<int>(i);
            }
            const double ratio = static_cast<double>(workers[static_cast<size_t>(best)].matched_chunks) /
                                 static_cast<double>(prompt_chunks);
            return ratio >= c.cache_threshold ? best : least;
          },
      },
      policy);
}

Result<RoutingPolicy> ParseRoutingPolicy(std::string_view name) {
  if (name == "round_robin") return RoutingPolicy{RoundRobin{}};
  if (name == "least_load" || name == "shortest_queue") return RoutingPolicy{LeastLoad{}};
  if (name == "cache_aware") return RoutingPolicy{CacheAware{}};
  return InvalidArgument("unknown routing policy '" + std::string(name) +
                         "' (round_robin, least_load or cache_aware)");
}

std::string_view PolicyName(const RoutingPolicy& policy) {
  return std::visit(Overloaded{[](const RoundRobin&) { return std::string_view("round_robin"); },
                               [](const LeastLoad&) { return std::string_view("least_load"); },
                               [](const CacheAware&) { return std::string_view("cache_aware"); }},
                    policy);
}

}  // namespace peregrine::router
