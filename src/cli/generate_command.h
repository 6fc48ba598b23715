#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

// `peregrine generate`: greedy decoding on the CPU backend from prompt token ids.
void AddGenerateCommand(CLI::App& app);

}  // namespace peregrine::cli
