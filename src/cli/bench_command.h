#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

// `peregrine bench`: a serving load generator for Peregrine and any OpenAI-compatible server
// (closed-loop concurrency sweep or open-loop Poisson rates; TTFT/TPOT/ITL/e2e percentiles).
void AddBenchCommand(CLI::App& app);

}  // namespace peregrine::cli
