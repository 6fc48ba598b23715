// The path shared by /v1/chat/completions and /v1/completions: admission (draining, the
// in-flight cap, the engine queue) before any parsing, then parse + render + tokenize on a
// worker thread, then a GenerationJob on the connection thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/generation_job.h"
#include "server/http_message.h"
#include "server/openai_request.h"
#include "server/response_channel.h"
#include "server/serving_context.h"

namespace peregrine::server {

// What a route's preparation produces: a job, an immediate response, or an error.
struct PreparedJob {
  JobSpec spec;
  std::unique_ptr<ResponseFormatter> formatter;
  std::optional<HttpResponse> immediate;
  std::optional<ApiError> error;
};

// Runs on a worker thread; must not throw (ServeGeneration turns an exception into a 500).
using PrepareFn = std::function<PreparedJob(std::string body, ServingContext& context)>;

void ServeGeneration(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                     std::shared_ptr<ResponseChannel> channel, PrepareFn prepare);

// The two routes (chat_handler.cc, completion_handler.cc).
void HandleChatCompletions(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                           std::shared_ptr<ResponseChannel> channel);
void HandleCompletions(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                       std::shared_ptr<ResponseChannel> channel);

// Helpers for the prepare functions.
// Checks the prompt against the context and resolves max_tokens (absent: what is left).
std::optional<ApiError> ResolveMaxTokens(int64_t num_prompt_tokens, int64_t max_context,
                                         bool is_chat, std::optional<int64_t>* max_tokens);
// Every id is below the model's vocabulary (the tokenizer may know more ids than the model).
std::optional<ApiError> CheckPromptIds(const std::vector<int32_t>& ids, int64_t vocab_size);
// Compiles the request's grammar (structured outputs) on the calling worker thread, within
// the engine's time limit; `out` stays null when the request has none.
std::optional<ApiError> CompileGrammar(ServingContext& context, const StructuredRequest& request,
                                       std::shared_ptr<const structured::CompiledGrammar>* out);
// One EngineRequest per choice; seeds are seed + choice index when a seed was given.
EngineRequest MakeEngineRequest(const std::string& response_id, size_t choice,
                                const std::vector<int32_t>& prompt_ids,
                                const GenerationOptions& options, int64_t max_tokens);

}  // namespace peregrine::server
