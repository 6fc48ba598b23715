// The `peregrine` binary: one entry point, one subcommand per file.
#include <CLI/CLI.hpp>

#include "cli/generate_command.h"
#include "cli/render_chat_command.h"
#include "cli/tokenize_command.h"

int main(int argc, char** argv) {
  CLI::App app{"Peregrine: DeepSeek-V4 inference server"};
  app.require_subcommand(1);
  peregrine::cli::AddGenerateCommand(app);
  peregrine::cli::AddTokenizerCommands(app);
  peregrine::cli::AddRenderChatCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
