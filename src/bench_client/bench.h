// `peregrine bench` end to end: warm-up, the sweep of runs, tables and the results file.
#pragma once

#include <cstdio>
#include <vector>

#include "base/status.h"
#include "bench_client/bench_config.h"
#include "bench_client/report.h"

namespace peregrine::bench_client {

// Validates `config`, asks the server for a model name when none is given, sends the warm-up
// requests, then runs every load of the sweep in order: each run sends its own prompts (the
// workload seed plus the run's index), so a prefix cache cannot carry one run into the next.
// Prints progress and one table per run to `out` and appends one JSON line per run to
// config.result_file. Fails with kInvalidArgument on a bad config, kUnavailable when the server
// cannot be reached, lists no model or fails every warm-up request, or when the results file
// cannot be written (the runs before stay reported). Failed requests inside a run are counted
// in its metrics, not returned as errors.
Result<std::vector<RunReport>> RunBench(const BenchConfig& config, std::FILE* out);

}  // namespace peregrine::bench_client
