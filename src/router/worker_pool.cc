#include "router/worker_pool.h"

#include <algorithm>

namespace peregrine::router {

WorkerPool::WorkerPool(std::vector<std::string> names, RoutingPolicy policy, size_t prefix_keys_per_worker,
                       int unhealthy_after)
    : policy_(policy), unhealthy_after_(std::max(unhealthy_after, 1)) {
  for (std::string& n : names) workers_.push_back({std::move(n), true, 0, 0, 0, PrefixIndex(prefix_keys_per_worker), {}, 0});
}

int WorkerPool::Acquire(const std::vector<uint64_t>& keys, std::span<const int> tried) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerView> views(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    views[i].is_eligible = w.is_healthy && std::find(tried.begin(), tried.end(), static_cast<int>(i)) == tried.end();
    views[i].load = w.in_flight + w.queued;
    if (views[i].is_eligible && std::holds_alternative<CacheAware>(policy_)) views[i].matched_chunks = w.prefixes.Match(keys);
  }
  const int pick = ChooseWorker(policy_, views, keys.size(), turn_++);
  if (pick >= 0) ++workers_[static_cast<size_t>(pick)].in_flight;
  return pick;
}

void WorkerPool::Fail(Worker& w) {
  if (++w.consecutive_failures >= unhealthy_after_ && w.is_healthy) {
    w.is_healthy = false;
    ++w.ejections;
  }
}

void WorkerPool::Release(int i, int status, const std::vector<uint64_t>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  Worker& w = workers_[static_cast<size_t>(i)];
  --w.in_flight;
  auto it = std::find_if(w.responses.begin(), w.responses.end(), [&](const auto& r) { return r.first == status; });
  if (it == w.responses.end()) w.responses.emplace_back(status, 1);
  else ++it->second;
  if (status == 0) {
    Fail(w);
    return;
  }
  w.consecutive_failures = 0;
  if (status < 400 && std::holds_alternative<CacheAware>(policy_)) w.prefixes.Insert(keys);
}

void WorkerPool::CountRetry() {
  std::lock_guard<std::mutex> lock(mu_);
  ++retries_;
}

void WorkerPool::CountUnroutable() {
  std::lock_guard<std::mutex> lock(mu_);
  ++unroutable_;
}

void WorkerPool::ReportHealth(int i, bool ok, std::optional<int64_t> queued) {
  std::lock_guard<std::mutex> lock(mu_);
  Worker& w = workers_[static_cast<size_t>(i)];
  if (queued.has_value()) w.queued = *queued;
  if (!ok) {
    Fail(w);
    return;
  }
  w.consecutive_failures = 0;
  w.is_healthy = true;
}

bool WorkerPool::any_healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.is_healthy; });
}

namespace {

std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string WorkerPool::RenderMetrics(std::string_view prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string p = std::string(prefix) + ":router_";
  std::string out;
  auto family = [&](const std::string& name, const char* help, const char* type) {
    out += "# HELP " + p + name + " " + help + "\n# TYPE " + p + name + " " + type + "\n";
  };
  family("worker_healthy", "Whether the worker takes requests (1) or is ejected (0).", "gauge");
  for (const Worker& w : workers_)
    out += p + "worker_healthy{worker=\"" + Escape(w.name) + "\"} " + (w.is_healthy ? "1" : "0") + "\n";
  family("worker_requests_in_flight", "Requests the router has in flight at the worker.", "gauge");
  for (const Worker& w : workers_)
    out += p + "worker_requests_in_flight{worker=\"" + Escape(w.name) + "\"} " + std::to_string(w.in_flight) + "\n";
  family("worker_queued_requests", "Running and waiting requests the worker last reported.", "gauge");
  for (const Worker& w : workers_)
    out += p + "worker_queued_requests{worker=\"" + Escape(w.name) + "\"} " + std::to_string(w.queued) + "\n";
  family("worker_ejections_total", "Times the worker was taken out after failing.", "counter");
  for (const Worker& w : workers_)
    out += p + "worker_ejections_total{worker=\"" + Escape(w.name) + "\"} " + std::to_string(w.ejections) + "\n";
  family("requests_total", "Requests relayed, by worker and HTTP status (0: the worker could not be reached).",
         "counter");
  for (const Worker& w : workers_)
    for (const auto& [status, count] : w.responses)
      out += p + "requests_total{worker=\"" + Escape(w.name) + "\",code=\"" + std::to_string(status) + "\"} " +
             std::to_string(count) + "\n";
  family("retries_total", "Requests sent to another worker after one failed before answering.", "counter");
  out += p + "retries_total " + std::to_string(retries_) + "\n";
  family("unroutable_requests_total", "Requests answered 503 because no worker was left.", "counter");
  out += p + "unroutable_requests_total " + std::to_string(unroutable_) + "\n";
  return out;
}

}  // namespace peregrine::router
