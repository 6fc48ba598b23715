// The router's host logic: prefix keys and the LRU index, the routing policies over worker
// snapshots, the routing text of requests, and the worker pool's ejection and metrics.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "router/prefix_index.h"
#include "router/routing_policy.h"
#include "router/routing_text.h"
#include "router/worker_pool.h"

namespace peregrine::router {
namespace {

TEST(PrefixIndexTest, KeysNameWholePrefixesAndTheIndexForgetsTheOldest) {
  const std::string a(200, 'a');
  const std::string b = std::string(64, 'a') + std::string(136, 'b');
  const std::vector<uint64_t> ka = PrefixKeys(a), kb = PrefixKeys(b);
  ASSERT_EQ(ka.size(), 4u);  // 3 full chunks and a partial one
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_NE(ka[1], kb[1]);
  // A chunk's key depends on what precedes it.
  EXPECT_NE(PrefixKeys(std::string(64, 'b') + std::string(64, 'a'))[1], ka[1]);
  EXPECT_TRUE(PrefixKeys("").empty());

  PrefixIndex index(6);
  index.Insert(ka);
  EXPECT_EQ(index.Match(ka), 4u);
  EXPECT_EQ(index.Match(kb), 1u);
  index.Insert(kb);  // 3 new keys: the two least recently used of a's go
  EXPECT_EQ(index.size(), 6u);
  EXPECT_EQ(index.Match(kb), 4u);
  EXPECT_LT(index.Match(ka), 4u);
}

std::vector<WorkerView> Views(std::vector<int64_t> loads, std::vector<size_t> matched) {
  std::vector<WorkerView> v;
  for (size_t i = 0; i < loads.size(); ++i) v.push_back({true, loads[i], matched[i]});
  return v;
}

TEST(RoutingPolicyTest, RoundRobinSkipsIneligibleWorkers) {
  std::vector<WorkerView> w = Views({0, 0, 0}, {0, 0, 0});
  w[1].is_eligible = false;
  EXPECT_EQ(ChooseWorker(RoundRobin{}, w, 0, 0), 0);
  EXPECT_EQ(ChooseWorker(RoundRobin{}, w, 0, 1), 2);
  EXPECT_EQ(ChooseWorker(RoundRobin{}, w, 0, 2), 2);
  EXPECT_EQ(ChooseWorker(RoundRobin{}, w, 0, 3), 0);
  for (WorkerView& x : w) x.is_eligible = false;
  EXPECT_EQ(ChooseWorker(RoundRobin{}, w, 0, 0), -1);
  EXPECT_EQ(ChooseWorker(LeastLoad{}, w, 0, 0), -1);
  EXPECT_EQ(ChooseWorker(CacheAware{}, w, 4, 0), -1);
}

TEST(RoutingPolicyTest, LeastLoadAndCacheAffinityUntilLoadsDrift) {
  EXPECT_EQ(ChooseWorker(LeastLoad{}, Views({5, 2, 9}, {0, 0, 0}), 0, 7), 1);
  const CacheAware c;  // threshold 0.5, abs 32, rel 1.5
  // Balanced: the worker holding most of the prompt, even when busier.
  EXPECT_EQ(ChooseWorker(c, Views({10, 3, 4}, {8, 1, 0}), 10, 0), 0);
  // Matches below the threshold: least load.
  EXPECT_EQ(ChooseWorker(c, Views({10, 3, 4}, {4, 1, 0}), 10, 0), 1);
  // Imbalanced past both thresholds: least load whatever the cache says.
  EXPECT_EQ(ChooseWorker(c, Views({60, 3, 4}, {10, 0, 0}), 10, 0), 1);
  // A gap of 40 but a ratio of 1.4 is still balanced.
  EXPECT_EQ(ChooseWorker(c, Views({140, 100, 120}, {10, 0, 0}), 10, 0), 0);
  // Equal matches go to the less loaded one.
  EXPECT_EQ(ChooseWorker(c, Views({9, 7, 8}, {6, 6, 2}), 10, 0), 1);
}

TEST(RoutingPolicyTest, Names) {
  EXPECT_TRUE(std::holds_alternative<LeastLoad>(*ParseRoutingPolicy("shortest_queue")));
  EXPECT_EQ(PolicyName(*ParseRoutingPolicy("cache_aware")), "cache_aware");
  EXPECT_EQ(PolicyName(*ParseRoutingPolicy("round_robin")), "round_robin");
  EXPECT_EQ(ParseRoutingPolicy("random").status().code(), StatusCode::kInvalidArgument);
}

TEST(RoutingTextTest, PromptsMessagesAndGarbage) {
  EXPECT_EQ(RoutingText(R"({"model":"m","prompt":"hello"})"), "hello");
  EXPECT_EQ(RoutingText(R"({"prompt":["ab","cd"]})"), "abcd");
  EXPECT_EQ(RoutingText(R"({"prompt":[1,2,3]})"), "1,2,3,");
  EXPECT_EQ(RoutingText(R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"U"}]}]})"),
            "system\nS\nuser\nU\n");
  EXPECT_EQ(RoutingText("not json"), "not json");
}

TEST(WorkerPoolTest, UnreachableWorkersAreEjectedUntilAHealthCheckPasses) {
  WorkerPool pool({"http://a:1", "http://b:2"}, RoundRobin{}, 100, /*unhealthy_after=*/2);
  const std::vector<uint64_t> keys = PrefixKeys("prompt");
  std::vector<int> tried;
  const int first = pool.Acquire(keys, tried);
  ASSERT_GE(first, 0);
  pool.Release(first, 0, keys);
  tried = {1 - first};
  EXPECT_EQ(pool.Acquire(keys, tried), first) << "one failure does not eject";
  pool.Release(first, 0, keys);
  EXPECT_EQ(pool.Acquire(keys, tried), -1) << "two in a row do";
  EXPECT_TRUE(pool.any_healthy());
  pool.ReportHealth(1 - first, false, std::nullopt);
  pool.ReportHealth(1 - first, false, std::nullopt);
  EXPECT_FALSE(pool.any_healthy());
  pool.ReportHealth(first, true, 5);
  EXPECT_TRUE(pool.any_healthy());
  const int again = pool.Acquire(keys, {});
  EXPECT_EQ(again, first);
  pool.Release(again, 200, keys);
  pool.CountRetry();
  pool.CountUnroutable();
  const std::string m = pool.RenderMetrics("peregrine");
  const std::string name = pool.name(static_cast<size_t>(first));
  EXPECT_NE(m.find("peregrine:router_worker_healthy{worker=\"" + name + "\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("peregrine:router_requests_total{worker=\"" + name + "\",code=\"0\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("peregrine:router_requests_total{worker=\"" + name + "\",code=\"200\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("peregrine:router_worker_ejections_total{worker=\"" + name + "\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("peregrine:router_worker_queued_requests{worker=\"" + name + "\"} 5"), std::string::npos) << m;
  EXPECT_NE(m.find("peregrine:router_retries_total 1"), std::string::npos) << m;
  EXPECT_NE(m.find("peregrine:router_unroutable_requests_total 1"), std::string::npos) << m;
}

TEST(WorkerPoolTest, CacheAwareFollowsServedPrompts) {
  WorkerPool pool({"http://a:1", "http://b:2"}, CacheAware{}, 1000, 3);
  const std::vector<uint64_t> keys = PrefixKeys(std::string(640, 'x'));
  const int w = pool.Acquire(keys, {});
  pool.Release(w, 200, keys);
  for (int i = 0; i < 5; ++i) {
    const int again = pool.Acquire(keys, {});
    EXPECT_EQ(again, w);
    pool.Release(again, 200, keys);
  }
  // Another prompt goes to the idle worker (no match anywhere: least load, ties to the lower index).
  const std::vector<uint64_t> other = PrefixKeys(std::string(640, 'y'));
  const int busy = pool.Acquire(keys, {});  // keep w loaded
  EXPECT_EQ(pool.Acquire(other, {}), 1 - w);
  pool.Release(busy, 200, keys);
}

}  // namespace
}  // namespace peregrine::router
