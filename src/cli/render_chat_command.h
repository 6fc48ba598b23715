#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::cli {

// `peregrine render-chat`: prints the prompt for a chat request, to check what the model sees.
// Reads {"messages": [...], "tools": [...], "options": {...}, "chat_template_kwargs": {...}} from
// a file or stdin; renders it with the DeepSeek-V4 encoder, or with a Jinja chat template
// (`--template FILE`, a .jinja file or a tokenizer_config.json).
void AddRenderChatCommand(CLI::App& app);

// The work behind the command, without I/O. `request` as above; "options" holds thinking,
// reasoning_effort, drop_thinking and add_generation_prompt (command-line flags, when given,
// override them). With `chat_template`, the Jinja path gets messages, tools,
// add_generation_prompt, special_tokens (default: DeepSeek's BOS/EOS) and chat_template_kwargs.
struct RenderChatOverrides {
  std::optional<bool> thinking;
  std::optional<std::string> reasoning_effort;
  std::optional<bool> drop_thinking;
  std::optional<bool> add_generation_prompt;
};
Result<std::string> RenderChatRequest(const nlohmann::ordered_json& request, const RenderChatOverrides& overrides,
                                      const std::optional<std::string>& chat_template,
                                      const nlohmann::ordered_json& special_tokens);

}  // namespace peregrine::cli
