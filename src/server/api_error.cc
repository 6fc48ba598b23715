#include "server/api_error.h"

#include <string>
#include <utility>

namespace peregrine::server {

ApiError InvalidRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError ContextLengthExceeded(int64_t max_context, int64_t num_prompt_tokens,
                               int64_t max_tokens, bool is_chat) {
  const char* input = is_chat ? "messages" : "prompt";
  std::string message = "This model's maximum context length is " + std::to_string(max_context) +
                        " tokens. ";
  if (max_tokens <= 0) {
    message += "However, your request has " + std::to_string(num_prompt_tokens) +
               " input tokens. Please reduce the length of the input " + input + ".";
    return InvalidRequest(std::move(message), input, "context_length_exceeded");
  }
  message += "However, you requested " + std::to_string(num_prompt_tokens) + " + " +
             std::to_string(max_tokens) + " tokens (" + std::to_string(num_prompt_tokens) +
             " in the " + input + ", " + std::to_string(max_tokens) +
             " in the completion). Please reduce the length of the " + input +
             " or completion.";
  return InvalidRequest(std::move(message), "max_tokens", "context_length_exceeded");
}

ApiError NotFound(std::string message, std::string code) {
  ApiError e;
  e.status = 404;
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

ApiError Unauthorized() {
  ApiError e;
  e.status = 401;
  e.message = "Incorrect or missing API key.";
  e.code = "invalid_api_key";
  return e;
}

ApiError Overloaded(int retry_after_seconds) {
  ApiError e;
  e.status = 429;
  e.type = "rate_limit_error";
  e.message = "The server is overloaded; retry later.";
  e.code = "rate_limit_exceeded";
  e.retry_after_seconds = retry_after_seconds;
  return e;
}

ApiError Draining(int retry_after_seconds) {
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable_error";
  e.message = "The server is shutting down.";
  e.code = "server_shutting_down";
  e.retry_after_seconds = retry_after_seconds;
  return e;
}

ApiError NotReady(int retry_after_seconds) {
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable_error";
  e.message = "The engine is not ready.";
  e.code = "engine_not_ready";
  e.retry_after_seconds = retry_after_seconds;
  return e;
}

ApiError InternalError(std::string message) {
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  e.message = std::move(message);
  e.code = "internal_error";
  return e;
}

ApiError FromStatus(const Status& status, int retry_after_seconds, std::string param) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
    case StatusCode::kUnimplemented:
    case StatusCode::kDeadlineExceeded:  // a request's grammar that compiles too slowly
      return InvalidRequest(status.message(), std::move(param));
    case StatusCode::kResourceExhausted:
      return Overloaded(retry_after_seconds);
    case StatusCode::kUnavailable: {
      ApiError e = NotReady(retry_after_seconds);
      e.message = "The engine is unavailable.";
      e.code = "engine_unavailable";
      return e;
    }
    case StatusCode::kOk:
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
      break;
  }
  return InternalError("The server failed to process the request.");
}

namespace {

std::string CodeOfStatus(int status) {
  switch (status) {
    case 400: return "invalid_value";
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 413: return "request_too_large";
    case 429: return "rate_limit_exceeded";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request";
  }
}

}  // namespace

Json ErrorEnvelope(const ApiError& error) {
  Json body = Json::object();
  body["message"] = error.message;
  body["type"] = error.type;
  body["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  body["code"] = error.code.empty() ? CodeOfStatus(error.status) : error.code;
  return Json{{"error", std::move(body)}};
}

HttpResponse ErrorResponse(const ApiError& error) {
  HttpResponse r;
  r.status = error.status;
  r.body = DumpJson(ErrorEnvelope(error));
  if (error.retry_after_seconds > 0) {
    r.headers.emplace_back("retry-after", std::to_string(error.retry_after_seconds));
  }
  if (error.status >= 500 && error.is_deterministic) {
    r.headers.emplace_back("x-should-retry", "false");
  }
  return r;
}

}  // namespace peregrine::server
