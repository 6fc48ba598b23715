#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

// `peregrine profile`: decode steps on the CUDA backend at given batch sizes, with the GPU
// time per op kind, the graphed step time, and per-layer time against its weight-streaming
// roofline.
void AddProfileCommand(CLI::App& app);

}  // namespace peregrine::cli
