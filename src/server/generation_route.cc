#include "server/generation_route.h"

#include <utility>

#include "server/disaggregated_serving.h"

namespace peregrine::server {

std::optional<ApiError> ResolveMaxTokens(int64_t num_prompt_tokens, int64_t max_context,
                                         bool is_chat, std::optional<int64_t>* max_tokens) {
  // A prompt that fills the context leaves no room for even one token (the >= rule).
  if (num_prompt_tokens >= max_context) {
    return ContextLengthExceeded(max_context, num_prompt_tokens, 0, is_chat);
  }
  const int64_t room = max_context - num_prompt_tokens;
  if (!max_tokens->has_value()) {
    *max_tokens = room;
  } else if (**max_tokens > room) {
    return ContextLengthExceeded(max_context, num_prompt_tokens, **max_tokens, is_chat);
  }
  return std::nullopt;
}

std::optional<ApiError> CheckPromptIds(const std::vector<int32_t>& ids, int64_t vocab_size) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return InvalidRequest("The prompt contains a token id the model does not accept.",
                            "prompt", "invalid_token_id");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> CompileGrammar(ServingContext& context, const StructuredRequest& request,
                                       std::shared_ptr<const structured::CompiledGrammar>* out) {
  if (!request.spec) return std::nullopt;
  Result<structured::GrammarEngine*> engine = context.grammars();
  if (!engine.ok()) return InternalError("Structured outputs are unavailable: the grammar engine failed to start.");
  Result<std::shared_ptr<const structured::CompiledGrammar>> compiled = (*engine)->Compile(*request.spec);
  if (!compiled.ok()) return GrammarError(compiled.status(), request);
  *out = std::move(*compiled);
  return std::nullopt;
}

EngineRequest MakeEngineRequest(const std::string& response_id, size_t choice,
                                const std::vector<int32_t>& prompt_ids,
                                const GenerationOptions& options, int64_t max_tokens) {
  EngineRequest r;
  r.id = response_id + "-" + std::to_string(choice);
  r.prompt_ids = prompt_ids;
  r.sampling = options.sampling;
  if (options.sampling.seed) r.sampling.seed = *options.sampling.seed + choice;
  r.max_tokens = max_tokens;
  r.stop_token_ids = options.stop_token_ids;
  r.ignore_eos = options.ignore_eos;
  r.cache_salt = options.cache_salt;
  r.prompt_logprobs = options.prompt_logprobs;
  return r;
}

void ServeGeneration(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                     std::shared_ptr<ResponseChannel> channel, PrepareFn prepare) {
  const int retry_after = context->config.retry_after_seconds;
  // Rejections come before the body is even parsed: overload must stay cheap. (A prefill
  // server still tells the decode side that waits for the request's KV.)
  auto refuse = [&](const ApiError& error) {
    PublishRefusal(*context, request.body, error);
    channel->Respond(ErrorResponse(error));
  };
  if (context->is_draining()) return refuse(Draining(retry_after));
  std::shared_ptr<void> ticket = context->TryAdmit();
  if (!ticket) return refuse(Overloaded(retry_after));
  const EngineStats stats = context->engine.Stats();
  if (!stats.is_ready) return refuse(NotReady(retry_after));
  const int max_waiting = context->config.limits.max_waiting_requests;
  if (max_waiting > 0 && stats.num_waiting >= max_waiting) return refuse(Overloaded(retry_after));
  std::shared_ptr<TaskQueue> home = channel->home();
  auto task = [context, channel, home, prepare = std::move(prepare), ticket,
               body = std::move(request.body), request_id = std::move(request.request_id),
               arrival = request.arrival]() mutable {
    auto prepared = std::make_shared<PreparedJob>();
    try {
      const bool keep = context->config.disaggregation.mode == DisaggregationMode::kPrefill;
      *prepared = prepare(keep ? body : std::move(body), *context);
    } catch (...) {
      prepared->error = InternalError("The server failed to prepare the request.");
    }
    if (prepared->error) PublishRefusal(*context, body, *prepared->error);
    home->Post([context, channel, prepared, ticket, request_id, arrival] {
      if (channel->is_client_gone()) return;
      if (prepared->error) {
        channel->Respond(ErrorResponse(*prepared->error));
      } else if (prepared->immediate) {
        channel->Respond(std::move(*prepared->immediate));
      } else if (context->is_draining()) {
        channel->Respond(ErrorResponse(Draining(context->config.retry_after_seconds)));
      } else {
        prepared->spec.request_id = request_id;
        prepared->spec.arrival = arrival;
        StartGeneration(context, channel, std::move(prepared->formatter), std::move(prepared->spec), ticket);
      }
    });
  };
  if (!context->workers->Post(std::move(task))) {
    channel->Respond(ErrorResponse(Draining(retry_after)));
  }
}

}  // namespace peregrine::server
