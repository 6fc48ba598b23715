// Histogram: a Prometheus histogram with fixed upper bounds, lock-free to observe.
//
// Thread-safety: Observe may run on any thread (relaxed atomics); the accessors read each
// bucket atomically, so a snapshot taken during observations is off by at most those.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace peregrine::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);  // NaN is ignored

  std::span<const double> upper_bounds() const { return upper_bounds_; }
  // Per-bucket counts, not cumulative; one more than the bounds (the last is above them all).
  std::vector<uint64_t> counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// 1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's token-count buckets).
std::vector<double> OneTwoFiveBounds(int64_t max_value);

}  // namespace peregrine::server
