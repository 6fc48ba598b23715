// The `peregrine` binary: one entry point, one subcommand per file.
#include <CLI/CLI.hpp>

#include "cli/generate_command.h"

int main(int argc, char** argv) {
  CLI::App app{"Peregrine: DeepSeek-V4 inference server"};
  app.require_subcommand(1);
  peregrine::cli::AddGenerateCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
