// Typed, validated OpenAI requests. Parsing checks every field's type and range against the
// server limits before anything is allocated from it (n, stop, logit_bias, tools are capped
// first) and reports the first problem as a 400 ApiError naming the parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/v4_encoder.h"
#include "sampling/sampling_params.h"
#include "server/api_error.h"
#include "server/json_text.h"
#include "server/server_config.h"
#include "server/structured_request.h"

namespace peregrine::server {

// What validation needs besides the body.
struct ParseContext {
  const ServerConfig* config = nullptr;
  int64_t vocab_size = 0;  // the model's: every token id must be below it
};

// Fields shared by chat and text completions.
// Disaggregation (SGLang's request fields, set by the router): where the prefill server
// publishes the request's KV (its transfer host and port) and under which room.
struct Bootstrap {
  std::string host;
  uint16_t port = 0;
  uint64_t room = 0;
};

struct GenerationOptions {
  SamplingParams sampling;
  std::optional<int64_t> max_tokens;  // absent: what the context leaves (chat) or 16
  int n = 1;
  std::vector<std::string> stop;      // non-empty strings
  bool include_stop_str_in_output = false;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::string cache_salt;             // prefix-cache namespace (vLLM's cache_salt)
  StructuredRequest structured;       // the output's grammar, if any (structured_request.h)
  int32_t prompt_logprobs = -1;       // vLLM's prompt_logprobs: alternatives per prompt token
  std::optional<Bootstrap> bootstrap;  // bootstrap_host, bootstrap_port, bootstrap_room
};

struct ChatRequest {
  GenerationOptions options;
  Json messages;                      // validated shape; the encoder checks the rest
  Json tools;                         // null when the prompt gets no tools
  bool has_tools = false;             // parse tool calls from the output
  ToolChoice tool_choice;             // kRequired/kNamed: options.structured forces the call
  bool thinking = false;
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // the last (assistant) message is left open
  // The output starts inside the reasoning: thinking, unless a continued final message has
  // content (or tool calls) after its reasoning.
  bool starts_in_reasoning = false;
  chat::V4ReasoningEffort reasoning_effort = chat::V4ReasoningEffort::kNone;
  bool logprobs = false;              // options.sampling.logprobs holds top_logprobs
};

struct CompletionPrompt {
  bool is_text = true;
  std::string text;                   // when is_text
  std::vector<int32_t> token_ids;     // when !is_text (validated against the vocabulary)
};

struct CompletionRequest {
  GenerationOptions options;
  std::vector<CompletionPrompt> prompts;
  bool echo = false;
  bool echo_logprobs = false;         // echo with logprobs: the prompt's tokens lead the logprobs
};

// Each returns nullopt and fills `out`, or the first error. Never throws. Large parts of the
// body (messages, tools) are moved out of it.
std::optional<ApiError> ParseChatRequest(Json body, const ParseContext& context,
                                         ChatRequest* out);
std::optional<ApiError> ParseCompletionRequest(Json body, const ParseContext& context,
                                               CompletionRequest* out);

// The fields that shape a chat prompt (messages, tools, tool_choice, thinking, chat_template_kwargs,
// reasoning_effort, add_generation_prompt, continue_final_message) into `out`, leaving
// `out->options` alone; messages and tools are moved out of `body`. /v1/chat/completions and
// /tokenize share it.
std::optional<ApiError> ParseChatPrompt(Json& body, const ParseContext& context, ChatRequest* out);
// The V4 prompt text of a parsed chat request (special tokens as text, BOS first); a 400
// naming "messages" when the encoder refuses them.
Result<std::string> RenderChatPrompt(const ChatRequest& request);

// Parses a request body: valid UTF-8, bounded nesting, a JSON object. Never throws.
std::optional<ApiError> ParseJsonBody(std::string_view body, int max_depth, Json* out);

}  // namespace peregrine::server
