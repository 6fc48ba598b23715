// Reading a Prometheus text exposition (a server's /metrics) sample by sample: what the
// benchmark and the router take from a server's metrics, under any metric prefix.
#pragma once

#include <functional>
#include <string_view>

namespace peregrine::bench_client {

// Calls `sample(name, value)` for every sample line (name without labels); comments, blank
// lines and lines whose value does not parse are skipped.
void ForEachSample(std::string_view text, const std::function<void(std::string_view, double)>& sample);

}  // namespace peregrine::bench_client
