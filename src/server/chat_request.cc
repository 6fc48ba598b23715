// ParseChatRequest: the /v1/chat/completions body.
#include <string>
#include <utility>

#include "server/openai_fields.h"
#include "server/openai_request.h"

namespace peregrine::server {
namespace {

bool IsKnownRole(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" ||
         role == "developer" || role == "latest_reminder";
}

// The shape the encoder relies on; it checks the finer points itself.
std::optional<ApiError> CheckMessages(const Json& body) {
  const Json* messages = FindField(body, "messages");
  if (messages == nullptr) {
    return InvalidRequest("'messages' is required.", "messages", "missing_field");
  }
  if (!messages->is_array()) return InvalidRequest("'messages' must be an array.", "messages");
  if (messages->empty()) return InvalidRequest("'messages' must not be empty.", "messages");
  for (const Json& m : *messages) {
    if (!m.is_object()) return InvalidRequest("Each message must be an object.", "messages");
    const Json* role = FindField(m, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidRequest("Each message must have a string 'role'.", "messages");
    }
    if (!IsKnownRole(role->get_ref<const std::string&>())) {
      return InvalidRequest("A message has an unsupported role.", "messages");
    }
    const Json* content = FindField(m, "content");
    if (content == nullptr || content->is_string()) continue;
    if (!content->is_array()) {
      return InvalidRequest("Message content must be a string or an array of text parts.",
                            "messages");
    }
    for (const Json& part : *content) {
      const Json* type = part.is_object() ? FindField(part, "type") : nullptr;
      const Json* text = part.is_object() ? FindField(part, "text") : nullptr;
      if (type == nullptr || !type->is_string() || *type != "text" || text == nullptr ||
          !text->is_string()) {
        return InvalidRequest("Only text content parts are supported.", "messages");
      }
    }
  }
  return std::nullopt;
}

std::optional<ApiError> CheckTools(Json& body, const ServerLimits& limits, ChatRequest* out) {
  const Json* tools = FindField(body, "tools");
  if (auto e = ParseToolChoice(body, &out->tool_choice)) return e;
  if (tools == nullptr) return ApplyToolChoice(out->tool_choice, Json(), &out->options.structured);
  if (!tools->is_array()) return InvalidRequest("'tools' must be an array.", "tools");
  if (tools->size() > static_cast<size_t>(limits.max_tools)) {
    return InvalidRequest("'tools' has too many entries.", "tools");
  }
  for (const Json& tool : *tools) {
    const Json* type = tool.is_object() ? FindField(tool, "type") : nullptr;
    const Json* function = tool.is_object() ? FindField(tool, "function") : nullptr;
    const Json* name = function != nullptr && function->is_object()
                           ? FindField(*function, "name") : nullptr;
    if (type == nullptr || *type != "function" || name == nullptr || !name->is_string() ||
        name->get_ref<const std::string&>().empty()) {
      return InvalidRequest("Each tool must be a function with a name.", "tools");
    }
    const Json* parameters = FindField(*function, "parameters");
    if (parameters != nullptr && !parameters->is_object()) {
      return InvalidRequest("Tool parameters must be a JSON Schema object.", "tools");
    }
  }
  // tool_choice "none": the model is not told about the tools and nothing is parsed as a call.
  if (out->tool_choice.mode == ToolChoice::Mode::kNone) return std::nullopt;
  if (tools->empty()) return ApplyToolChoice(out->tool_choice, Json(), &out->options.structured);
  out->has_tools = true;
  out->tools = std::move(body["tools"]);
  return ApplyToolChoice(out->tool_choice, out->tools, &out->options.structured);
}

std::optional<ApiError> ReadThinking(const Json& body, const ServerConfig& config,
                                     ChatRequest* out) {
  if (FindField(body, "chat_template") != nullptr) {
    return InvalidRequest("'chat_template' is not accepted in requests.", "chat_template");
  }
  std::optional<bool> thinking;
  // The DeepSeek API's switch: {"type": "enabled" | "disabled"}.
  if (const Json* api = FindField(body, "thinking")) {
    const Json* type = api->is_object() ? FindField(*api, "type") : nullptr;
    const bool is_known = type != nullptr && type->is_string() &&
                          (*type == "enabled" || *type == "disabled");
    if (!is_known) {
      return InvalidRequest("'thinking' must be {\"type\": \"enabled\"} or {\"type\": \"disabled\"}.",
                            "thinking", api->is_object() ? "invalid_value" : "invalid_type");
    }
    thinking = *type == "enabled";
  }
  if (const Json* kwargs = FindField(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      return InvalidRequest("'chat_template_kwargs' must be an object.", "chat_template_kwargs");
    }
    for (const char* key : {"thinking", "enable_thinking"}) {
      bool value = false;
      if (FindField(*kwargs, key) == nullptr) continue;
      if (ReadBool(*kwargs, key, &value)) {
        return InvalidRequest("'chat_template_kwargs.thinking' must be a boolean.",
                              "chat_template_kwargs", "invalid_type");
      }
      if (thinking && *thinking != value) {
        return InvalidRequest("'thinking' and 'chat_template_kwargs.thinking' disagree.", "thinking");
      }
      thinking = value;
    }
  }
  if (const Json* effort = FindField(body, "reasoning_effort")) {
    if (!effort->is_string()) {
      return InvalidRequest("'reasoning_effort' must be a string.", "reasoning_effort");
    }
    Result<chat::V4ReasoningEffort> parsed =
        chat::ParseV4ReasoningEffort(effort->get_ref<const std::string&>());
    if (!parsed.ok()) {
      return InvalidRequest("'reasoning_effort' must be one of none, low, medium, high, max.",
                            "reasoning_effort");
    }
    out->reasoning_effort = *parsed;
  }
  // An explicit switch wins; asking for high or max effort implies thinking.
  out->thinking = thinking.value_or(out->reasoning_effort != chat::V4ReasoningEffort::kNone ||
                                    config.default_thinking);
  return std::nullopt;
}

// add_generation_prompt (default true) and continue_final_message (vLLM's semantics: the
// last message must be the assistant's; asking for both explicitly is an error).
std::optional<ApiError> ReadGenerationPrompt(const Json& body, ChatRequest* out) {
  if (auto e = ReadBool(body, "add_generation_prompt", &out->add_generation_prompt)) return e;
  if (auto e = ReadBool(body, "continue_final_message", &out->continue_final_message)) return e;
  if (!out->continue_final_message) return std::nullopt;
  if (FindField(body, "add_generation_prompt") != nullptr && out->add_generation_prompt) {
    return InvalidRequest(
        "'continue_final_message' and 'add_generation_prompt' cannot both be true.",
        "continue_final_message");
  }
  out->add_generation_prompt = false;
  const Json& last = FindField(body, "messages")->back();  // CheckMessages: a non-empty array
  if (last["role"] != "assistant") {
    return InvalidRequest("'continue_final_message' needs an assistant message last.",
                          "continue_final_message");
  }
  const Json* content = FindField(last, "content");
  const Json* calls = FindField(last, "tool_calls");
  const bool has_content = (content != nullptr && !content->empty() &&
                            !(content->is_string() && content->get_ref<const std::string&>().empty())) ||
                           (calls != nullptr && calls->is_array() && !calls->empty());
  out->starts_in_reasoning = out->thinking && !has_content;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseChatPrompt(Json& body, const ParseContext& context, ChatRequest* out) {
  if (auto e = CheckMessages(body)) return e;
  if (auto e = CheckTools(body, context.config->limits, out)) return e;
  if (auto e = ReadThinking(body, *context.config, out)) return e;
  out->starts_in_reasoning = out->thinking;
  if (auto e = ReadGenerationPrompt(body, out)) return e;
  out->messages = std::move(body["messages"]);
  return std::nullopt;
}

Result<std::string> RenderChatPrompt(const ChatRequest& request) {
  chat::V4EncodeOptions encode;
  encode.thinking = request.thinking;
  encode.reasoning_effort = request.reasoning_effort;
  encode.add_generation_prompt = request.add_generation_prompt;
  encode.continue_final_message = request.continue_final_message;
  const Json& format = request.options.structured.prompt_format;
  if (format.is_null()) return chat::EncodeV4Prompt(request.messages, request.tools, encode);
  // The schema goes into the first system message (one is added when the conversation has
  // none, as the encoder does for tools), as DeepSeek-V4's encoding shows it.
  Json messages = request.messages;
  if (!messages.empty() && messages[0].value("role", "") == "system") {
    messages[0]["response_format"] = format;
  } else {
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}, {"response_format", format}});
  }
  return chat::EncodeV4Prompt(messages, request.tools, encode);
}

std::optional<ApiError> ParseChatRequest(Json body, const ParseContext& context,
                                         ChatRequest* out) {
  if (auto e = ParseGenerationOptions(body, context, /*is_chat=*/true, &out->options)) return e;
  GenerationOptions& options = out->options;
  if (options.max_tokens && *options.max_tokens == 0) {
    return InvalidRequest("'max_tokens' must be at least 1.", "max_tokens");
  }
  if (auto e = ParseChatPrompt(body, context, out)) return e;

  if (auto e = ReadBool(body, "logprobs", &out->logprobs)) return e;
  std::optional<int64_t> top_logprobs;
  if (auto e = ReadInt(body, "top_logprobs", 0, kMaxTopLogprobs, &top_logprobs)) return e;
  if (top_logprobs && !out->logprobs) {
    return InvalidRequest("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs");
  }
  if (out->logprobs) options.sampling.logprobs = static_cast<int32_t>(top_logprobs.value_or(0));

  Status valid = ValidateSamplingParams(options.sampling, context.vocab_size);
  if (!valid.ok()) return InvalidRequest(valid.message());
  return std::nullopt;
}

}  // namespace peregrine::server
