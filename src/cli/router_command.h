#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

// `peregrine router`: the OpenAI-compatible front over a list of workers (router/router_server.h),
// with SGLang router's flag names. Serves until SIGINT or SIGTERM.
void AddRouterCommand(CLI::App& app);

}  // namespace peregrine::cli
