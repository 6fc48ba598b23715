#include "bench_client/load_runner.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "base/check.h"
#include "bench_client/workload.h"

namespace peregrine::bench_client {

namespace {

// The state of one run, shared by the caller's thread and the client threads running callbacks.
// It outlives every callback: the caller returns only after the last request has ended.
class LoadRun {
 public:
  LoadRun(StreamClient& client, std::span<const StreamRequest> requests, bool is_closed_loop)
      : client_(client), requests_(requests), is_closed_loop_(is_closed_loop), records_(requests.size()) {}

  // Caller thread. Claims the first `num_requests` requests in one step, before any can complete and
  // claim a successor (closed loop), then sends them.
  void SendFirst(size_t num_requests) {
    size_t first = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = next_;
      for (size_t i = 0; i < num_requests; ++i) ClaimLocked();
    }
    for (size_t i = 0; i < num_requests; ++i) Send(first + i);
  }

  // Caller thread, open loop only. Blocks while `max_in_flight` (> 0) requests are in flight,
  // then sends the next request in order.
  void SendNext(int max_in_flight) {
    size_t index = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (max_in_flight > 0) cv_.wait(lock, [&] { return in_flight_ < max_in_flight; });
      index = ClaimLocked();
    }
    Send(index);
  }

  RunResult Wait(Clock::time_point start) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return num_done_ == records_.size(); });
    RunResult result;
    Clock::time_point end = start;
    for (const RequestRecord& r : records_) end = std::max(end, r.end_time);
    result.duration_s = std::chrono::duration<double>(end - start).count();
    result.max_in_flight = max_in_flight_;
    result.records = std::move(records_);
    return result;
  }

 private:
  size_t ClaimLocked() {
    PG_CHECK(next_ < records_.size(), "claimed a request past the end of the run");
    ++in_flight_;
    max_in_flight_ = std::max(max_in_flight_, in_flight_);
    return next_++;
  }

  void Send(size_t index) {
    client_.Submit(requests_[index], [this, index](RequestRecord record) { OnDone(index, std::move(record)); });
  }

  // Client thread.
  void OnDone(size_t index, RequestRecord record) {
    std::optional<size_t> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_[index] = std::move(record);
      ++num_done_;
      --in_flight_;
      if (is_closed_loop_ && next_ < records_.size()) next = ClaimLocked();
      cv_.notify_all();  // under the lock: the waiter may destroy this object once it wakes
    }
    // A claimed request is not done yet, so the caller is still waiting and `this` is alive.
    if (next) Send(*next);
  }

  StreamClient& client_;
  const std::span<const StreamRequest> requests_;
  const bool is_closed_loop_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestRecord> records_;  // guarded by mu_
  size_t next_ = 0;                     // guarded by mu_
  size_t num_done_ = 0;                 // guarded by mu_
  int in_flight_ = 0;                   // guarded by mu_
  int max_in_flight_ = 0;               // guarded by mu_
};

}  // namespace

Status ValidateLoadShape(const LoadShape& shape) {
  if (const auto* closed = std::get_if<ClosedLoop>(&shape)) {
    if (closed->concurrency < 1) return InvalidArgument("concurrency must be at least 1");
    return Status::Ok();
  }
  const auto& open = std::get<OpenLoop>(shape);
  if (!(open.request_rate > 0)) return InvalidArgument("request rate must be positive (or inf)");
  if (open.max_concurrency < 0) return InvalidArgument("max concurrency must not be negative");
  return Status::Ok();
}

Result<RunResult> RunLoad(StreamClient& client, std::span<const StreamRequest> requests, const LoadShape& shape) {
  PG_RETURN_IF_ERROR(ValidateLoadShape(shape));
  const Clock::time_point start = Clock::now();
  if (requests.empty()) return RunResult{};
  if (const auto* closed = std::get_if<ClosedLoop>(&shape)) {
    LoadRun run(client, requests, /*is_closed_loop=*/true);
    const size_t num_initial = std::min<size_t>(static_cast<size_t>(closed->concurrency), requests.size());
    run.SendFirst(num_initial);
    return run.Wait(start);
  }
  const auto& open = std::get<OpenLoop>(shape);
  const std::vector<double> offsets =
      PoissonArrivalOffsets(static_cast<int>(requests.size()), open.request_rate, open.seed);
  LoadRun run(client, requests, /*is_closed_loop=*/false);
  for (double offset : offsets) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offset)));
    run.SendNext(open.max_concurrency);
  }
  return run.Wait(start);
}

}  // namespace peregrine::bench_client
