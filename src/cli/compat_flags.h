// The flags vLLM and SGLang launch scripts pass to their servers, on `peregrine serve`: as
// aliases of Peregrine's own flags where one exists, accepted when they select what Peregrine
// does anyway, and refused, with the supported values named, when they select what it does
// not do.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/serve_command.h"

namespace peregrine::cli {

void AddCompatFlags(CLI::App& serve, ServeOptions& options);

}  // namespace peregrine::cli
