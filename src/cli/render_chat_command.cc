#include "cli/render_chat_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "chat/jinja_template.h"
#include "chat/v4_encoder.h"

namespace peregrine::cli {
namespace {

using Json = nlohmann::ordered_json;

struct RenderChatFlags {
  std::string request_path = "-";
  std::string template_path;
  RenderChatOverrides overrides;
  bool thinking = false;
  bool chat = false;
  bool keep_thinking = false;
  bool no_generation_prompt = false;
  std::string reasoning_effort;
};

Result<std::string> ReadAll(const std::string& path) {
  if (path == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Result<bool> BoolOption(const Json& options, const char* key, bool fallback) {
  auto it = options.find(key);
  if (it == options.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return InvalidArgument(std::string("options.") + key + " must be a boolean");
  return it->get<bool>();
}

Result<chat::V4EncodeOptions> EncodeOptions(const Json& request, const RenderChatOverrides& overrides) {
  Json options = request.contains("options") ? request["options"] : Json::object();
  if (!options.is_object()) return InvalidArgument("options must be an object");
  chat::V4EncodeOptions out;
  PG_ASSIGN_OR_RETURN(out.thinking, BoolOption(options, "thinking", false));
  PG_ASSIGN_OR_RETURN(out.drop_thinking, BoolOption(options, "drop_thinking", true));
  PG_ASSIGN_OR_RETURN(out.add_generation_prompt, BoolOption(options, "add_generation_prompt", true));
  std::string effort;
  if (auto it = options.find("reasoning_effort"); it != options.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument("options.reasoning_effort must be a string");
    effort = it->get<std::string>();
  }
  if (overrides.thinking) out.thinking = *overrides.thinking;
  if (overrides.drop_thinking) out.drop_thinking = *overrides.drop_thinking;
  if (overrides.add_generation_prompt) out.add_generation_prompt = *overrides.add_generation_prompt;
  if (overrides.reasoning_effort) effort = *overrides.reasoning_effort;
  PG_ASSIGN_OR_RETURN(out.reasoning_effort, chat::ParseV4ReasoningEffort(effort));
  return out;
}

// A .json template file is a tokenizer_config.json: chat_template plus its special tokens.
Result<std::pair<std::string, Json>> LoadTemplate(const std::string& path) {
  PG_ASSIGN_OR_RETURN(std::string text, ReadAll(path));
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) return std::make_pair(text, Json::object());
  Json config = Json::parse(text, nullptr, false);
  if (!config.is_object() || !config.contains("chat_template") || !config["chat_template"].is_string())
    return InvalidArgument("tokenizer config has no string chat_template");
  Json tokens = Json::object();
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) tokens[key] = *it;
    else if (it->is_object() && it->contains("content")) tokens[key] = (*it)["content"];
  }
  return std::make_pair(config["chat_template"].get<std::string>(), tokens);
}

int RunRenderChat(const RenderChatFlags& flags) {
  auto fail = [](const Status& status) {
    std::fprintf(stderr, "render-chat: %s\n", status.ToString().c_str());
    return 1;
  };
  auto text = ReadAll(flags.request_path);
  if (!text.ok()) return fail(text.status());
  Json request = Json::parse(*text, nullptr, false);
  if (request.is_discarded()) return fail(InvalidArgument("request is not valid JSON"));

  RenderChatOverrides overrides = flags.overrides;
  if (flags.thinking) overrides.thinking = true;
  if (flags.chat) overrides.thinking = false;
  if (flags.keep_thinking) overrides.drop_thinking = false;
  if (flags.no_generation_prompt) overrides.add_generation_prompt = false;
  if (!flags.reasoning_effort.empty()) overrides.reasoning_effort = flags.reasoning_effort;

  std::optional<std::string> chat_template;
  Json special_tokens = Json::object();
  if (!flags.template_path.empty()) {
    auto loaded = LoadTemplate(flags.template_path);
    if (!loaded.ok()) return fail(loaded.status());
    chat_template = loaded->first;
    special_tokens = loaded->second;
  }
  auto prompt = RenderChatRequest(request, overrides, chat_template, special_tokens);
  if (!prompt.ok()) return fail(prompt.status());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

Result<std::string> RenderChatRequest(const Json& request, const RenderChatOverrides& overrides,
                                      const std::optional<std::string>& chat_template, const Json& special_tokens) {
  try {
    if (!request.is_object()) return InvalidArgument("request must be a JSON object");
    if (!request.contains("messages")) return InvalidArgument("request has no messages");
    Json tools = request.contains("tools") ? request["tools"] : Json();
    PG_ASSIGN_OR_RETURN(chat::V4EncodeOptions options, EncodeOptions(request, overrides));
    if (!chat_template) return chat::EncodeV4Prompt(request["messages"], tools, options);

    Json extra = Json::object();
    extra["bos_token"] = "<｜begin▁of▁sentence｜>";
    extra["eos_token"] = "<｜end▁of▁sentence｜>";
    if (special_tokens.is_object())
      for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it) extra[it.key()] = it.value();
    if (request.contains("special_tokens") && request["special_tokens"].is_object())
      for (auto it = request["special_tokens"].begin(); it != request["special_tokens"].end(); ++it)
        extra[it.key()] = it.value();
    if (overrides.thinking) extra["thinking"] = *overrides.thinking;
    if (request.contains("chat_template_kwargs")) {
      const Json& kwargs = request["chat_template_kwargs"];
      if (!kwargs.is_object()) return InvalidArgument("chat_template_kwargs must be an object");
      for (auto it = kwargs.begin(); it != kwargs.end(); ++it) extra[it.key()] = it.value();
    }
    PG_ASSIGN_OR_RETURN(chat::JinjaTemplate tmpl, chat::JinjaTemplate::Parse(*chat_template));
    return chat::RenderChatTemplate(tmpl, request["messages"], tools, options.add_generation_prompt, extra);
  } catch (const std::exception&) {
    return InvalidArgument("malformed chat request");
  }
}

void AddRenderChatCommand(CLI::App& app) {
  auto flags = std::make_shared<RenderChatFlags>();
  CLI::App* cmd = app.add_subcommand("render-chat", "Print the prompt a chat request renders to");
  cmd->add_option("request", flags->request_path,
                  "JSON file with messages, tools, options, chat_template_kwargs; '-' reads stdin")
      ->capture_default_str();
  cmd->add_option("--template", flags->template_path,
                  "Render with this Jinja chat template (.jinja, or a tokenizer_config.json) instead of the "
                  "DeepSeek-V4 encoder");
  cmd->add_flag("--thinking", flags->thinking, "Thinking mode (overrides options.thinking)");
  cmd->add_flag("--chat", flags->chat, "Chat mode (overrides options.thinking)");
  cmd->add_option("--reasoning-effort", flags->reasoning_effort, "none, high or max (DeepSeek-V4 encoder)");
  cmd->add_flag("--keep-thinking", flags->keep_thinking, "Keep the reasoning of earlier turns (drop_thinking=false)");
  cmd->add_flag("--no-generation-prompt", flags->no_generation_prompt, "Omit the trailing assistant header");
  cmd->callback([flags] {
    const int rc = RunRenderChat(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
