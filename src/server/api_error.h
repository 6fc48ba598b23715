// ApiError: an OpenAI-shaped error ({"error":{"message","type","param","code"}}) with its HTTP
// status. Messages are fixed strings chosen by the server, never request bytes.
#pragma once

#include <string>

#include "base/status.h"
#include "server/http_message.h"
#include "server/json_text.h"

namespace peregrine::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;            // empty: null
  std::string code;             // stable machine-readable kind; never null on the wire
  int retry_after_seconds = 0;  // > 0 adds Retry-After
  bool is_deterministic = false;  // a 5xx that must not be retried: x-should-retry: false
};

// 400 invalid_request_error. Codes: invalid_value (the default), invalid_type, missing_field,
// unsupported_parameter, invalid_token_id, invalid_json, invalid_encoding, context_length_exceeded.
ApiError InvalidRequest(std::string message, std::string param = "",
                        std::string code = "invalid_value");
// 400 context_length_exceeded with the token counts (numbers only, no request bytes).
ApiError ContextLengthExceeded(int64_t max_context, int64_t num_prompt_tokens,
                               int64_t max_tokens, bool is_chat);
ApiError NotFound(std::string message, std::string code);
ApiError Unauthorized();
ApiError Overloaded(int retry_after_seconds);     // 429
ApiError Draining(int retry_after_seconds);       // 503
ApiError NotReady(int retry_after_seconds);       // 503
ApiError InternalError(std::string message);      // 500
// Maps an engine or library Status: InvalidArgument/OutOfRange -> 400, ResourceExhausted ->
// 429, Unavailable -> 503, Unimplemented -> 400, anything else -> 500.
ApiError FromStatus(const Status& status, int retry_after_seconds, std::string param = "");

// The OpenAI envelope; an error without a code gets one from its status, so "code" is always
// a string.
Json ErrorEnvelope(const ApiError& error);
HttpResponse ErrorResponse(const ApiError& error);

}  // namespace peregrine::server
