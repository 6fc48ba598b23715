// Disaggregated serving in the generation path (ServerConfig::disaggregation). A request
// that names a bootstrap room (the router sets bootstrap_host/port/room):
// - on a prefill server generates its first token only, and its KV (or the reason there is
//   none) is published under the room on the server's KV sender; a request refused before
//   it reaches the engine publishes its refusal, so the decode side hears at once;
// - on a decode server first pulls the room's KV from the named prefill server, then runs
//   from it; a failed pull ends in an error response or a recompute, as the failure policy
//   says, never in tokens computed from a state that did not arrive whole.
// A server in neither mode refuses such requests.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "server/api_error.h"
#include "server/generation_job.h"
#include "server/openai_request.h"
#include "server/response_channel.h"
#include "server/serving_context.h"

namespace peregrine::server {

// In a route's prepare, once the spec's choices exist: the room's part of the spec.
std::optional<ApiError> ApplyDisaggregation(ServingContext& context, const GenerationOptions& options, JobSpec* spec);

// Starts the job on the connection thread: at once, or on a decode server once the spec's
// room was pulled (or its failure handled). The admission ticket is held meanwhile.
void StartGeneration(const std::shared_ptr<ServingContext>& context, const std::shared_ptr<ResponseChannel>& channel,
                     std::unique_ptr<ResponseFormatter> formatter, JobSpec spec, std::shared_ptr<void> ticket);

// Prefill side: a generation request answered with `error` before it reached the engine
// publishes the error under its room (if the body names one).
void PublishRefusal(ServingContext& context, std::string_view body, const ApiError& error);

}  // namespace peregrine::server
