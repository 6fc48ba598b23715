// Load shapes and the loop that drives one benchmark run through a StreamClient.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <variant>
#include <vector>

#include "base/status.h"
#include "bench_client/request_record.h"
#include "bench_client/stream_client.h"

namespace peregrine::bench_client {

// Closed loop: `concurrency` requests in flight; each completion sends the next request.
struct ClosedLoop {
  int concurrency = 1;
};

// Open loop: requests arrive as a seeded Poisson process of `request_rate` per second
// (+infinity: all at once), whatever the server's pace; `max_concurrency` > 0 holds an arrival
// back while that many are in flight.
struct OpenLoop {
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;
  uint64_t seed = 0;
};

using LoadShape = std::variant<ClosedLoop, OpenLoop>;

struct RunResult {
  std::vector<RequestRecord> records;  // records[i] answers requests[i]
  double duration_s = 0;               // first send to last end
  int max_in_flight = 0;               // most requests in flight at once
};

// Fails with kInvalidArgument when a concurrency or rate is not positive.
Status ValidateLoadShape(const LoadShape& shape);

// Sends every request with the given shape and blocks until all have ended (the client's
// request timeout bounds that). Failed requests are records, not errors.
Result<RunResult> RunLoad(StreamClient& client, std::span<const StreamRequest> requests, const LoadShape& shape);

}  // namespace peregrine::bench_client
