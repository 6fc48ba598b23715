// JSON bodies of the streaming generation requests a benchmark sends.
#pragma once

#include <string>
#include <string_view>

#include "bench_client/workload.h"

namespace peregrine::bench_client {

enum class ApiKind {
  kCompletions,      // POST /v1/completions with "prompt"
  kChatCompletions,  // POST /v1/chat/completions with one user message
};

// kChatCompletions when `endpoint` ends in "/chat/completions", else kCompletions.
ApiKind ApiKindForEndpoint(std::string_view endpoint);

// A streaming request with usage in the last chunk, max_tokens = spec.output_len and greedy
// sampling. With `ignore_eos` the server is asked to produce exactly max_tokens tokens (vLLM and
// SGLang honour "ignore_eos"; servers that do not know the field ignore it). An empty `model`
// leaves the field out. `extra_body` (a JSON object's text, or empty) is merged in last, its
// keys replacing the defaults (e.g. a response_format for structured outputs).
std::string BuildRequestBody(ApiKind kind, std::string_view model, const PromptSpec& spec, bool ignore_eos,
                             std::string_view extra_body = {});

}  // namespace peregrine::bench_client
