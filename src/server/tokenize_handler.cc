#include "server/tokenize_handler.h"

#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/openai_fields.h"
#include "server/openai_request.h"

namespace peregrine::server {
namespace {

HttpResponse JsonResponse(const Json& body) {
  HttpResponse r;
  r.body = DumpJson(body);
  return r;
}

// The same model rule as the generation routes: absent is the served model, another name 404.
std::optional<ApiError> CheckModel(const Json& body, const ServerConfig& config) {
  const Json* model = FindField(body, "model");
  if (model == nullptr) return std::nullopt;
  if (!model->is_string()) {
    return InvalidRequest("'model' must be a string.", "model", "invalid_type");
  }
  if (model->get_ref<const std::string&>() != config.model_name) {
    return NotFound("The model does not exist.", "model_not_found");
  }
  return std::nullopt;
}

HttpResponse Tokenize(Json body, ServingContext& context) {
  const ParseContext parse_context{&context.config, context.engine.vocab_size()};
  if (auto e = CheckModel(body, context.config)) return ErrorResponse(*e);
  const bool is_chat = FindField(body, "messages") != nullptr;
  if (is_chat && FindField(body, "prompt") != nullptr) {
    return ErrorResponse(InvalidRequest("Give either 'prompt' or 'messages', not both.", "prompt"));
  }
  bool add_special = !is_chat;  // a rendered chat prompt already starts with BOS
  bool return_strs = false;
  if (auto e = ReadBool(body, "add_special_tokens", &add_special)) return ErrorResponse(*e);
  if (auto e = ReadBool(body, "return_token_strs", &return_strs)) return ErrorResponse(*e);
  std::string text;
  if (is_chat) {
    ChatRequest chat;
    if (auto e = ParseChatPrompt(body, parse_context, &chat)) return ErrorResponse(*e);
    Result<std::string> prompt = RenderChatPrompt(chat);
    if (!prompt.ok()) return ErrorResponse(InvalidRequest(prompt.status().message(), "messages"));
    text = std::move(*prompt);
  } else {
    const Json* prompt = FindField(body, "prompt");
    if (prompt == nullptr) {
      return ErrorResponse(InvalidRequest("'prompt' or 'messages' is required.", "prompt",
                                          "missing_field"));
    }
    if (!prompt->is_string()) {
      return ErrorResponse(InvalidRequest("'prompt' must be a string.", "prompt", "invalid_type"));
    }
    text = prompt->get<std::string>();
  }
  Result<std::vector<int32_t>> ids =
      context.tokenizer.Encode(text, /*parse_special=*/true, add_special);
  if (!ids.ok()) {
    return ErrorResponse(InvalidRequest("The prompt could not be tokenized.",
                                        is_chat ? "messages" : "prompt"));
  }
  Json strs = nullptr;
  if (return_strs) {
    strs = Json::array();
    for (int32_t id : *ids) strs.push_back(std::string(context.tokenizer.IdToToken(id).value_or("")));
  }
  return JsonResponse({{"count", ids->size()},
                       {"max_model_len", context.engine.max_context()},
                       {"tokens", *ids},
                       {"token_strs", std::move(strs)}});
}

HttpResponse Detokenize(Json body, ServingContext& context) {
  if (auto e = CheckModel(body, context.config)) return ErrorResponse(*e);
  const Json* tokens = FindField(body, "tokens");
  if (tokens == nullptr) {
    return ErrorResponse(InvalidRequest("'tokens' is required.", "tokens", "missing_field"));
  }
  std::vector<int32_t> ids;
  if (auto e = ReadTokenIdArray(*tokens, "tokens", context.engine.vocab_size(), &ids)) {
    return ErrorResponse(*e);
  }
  return JsonResponse({{"prompt", context.tokenizer.Decode(ids, /*skip_special_tokens=*/false)}});
}

// Parses the body and runs `fn` on a worker; answers on the connection's thread.
void ServeOnWorker(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                   std::shared_ptr<ResponseChannel> channel,
                   HttpResponse (*fn)(Json, ServingContext&)) {
  std::shared_ptr<TaskQueue> home = channel->home();
  auto task = [context, channel, home, fn, body = std::move(request.body)]() mutable {
    auto response = std::make_shared<HttpResponse>();
    try {
      Json json;
      if (auto e = ParseJsonBody(body, context->config.limits.max_json_depth, &json)) {
        *response = ErrorResponse(*e);
      } else {
        *response = fn(std::move(json), *context);
      }
    } catch (...) {
      *response = ErrorResponse(InternalError("The server failed to handle the request."));
    }
    home->Post([channel, response] {
      if (!channel->is_client_gone()) channel->Respond(std::move(*response));
    });
  };
  if (!context->workers->Post(std::move(task))) {
    channel->Respond(ErrorResponse(Draining(context->config.retry_after_seconds)));
  }
}

}  // namespace

void HandleTokenize(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                    std::shared_ptr<ResponseChannel> channel) {
  ServeOnWorker(context, std::move(request), std::move(channel), Tokenize);
}

void HandleDetokenize(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                      std::shared_ptr<ResponseChannel> channel) {
  ServeOnWorker(context, std::move(request), std::move(channel), Detokenize);
}

}  // namespace peregrine::server
