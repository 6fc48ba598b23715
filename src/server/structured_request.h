// Structured outputs in a request: what the output must follow, from every spelling clients
// send — OpenAI's `response_format` (json_object, json_schema, structural_tag), vLLM's
// `structured_outputs` {json, regex, choice, grammar, json_object, structural_tag} and its
// older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`, SGLang's
// top-level `json_schema` / `regex` / `ebnf` — and, for chat, a forced tool call
// (`tool_choice` "required" or a named function, with `parallel_tool_calls`). At most one
// constraint per request; the grammar is compiled by the serving context's GrammarEngine.
#pragma once

#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/json_text.h"
#include "server/server_config.h"
#include "structured/grammar_spec.h"

namespace peregrine::server {

struct StructuredRequest {
  std::optional<structured::GrammarSpec> spec;  // absent: unconstrained
  const char* param = "";                        // the field it came from (for errors)
  // Chat: the response_format to show the model in the system prompt (json_schema and
  // json_object, as DeepSeek-V4's encoding does); null otherwise.
  Json prompt_format;
};

// The tools a chat request offers and how it may call them.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed } mode = Mode::kAuto;
  std::string name;           // kNamed
  bool parallel = true;       // parallel_tool_calls
};

// Reads the output constraint fields of a chat or completions body. Unknown response_format
// types, several constraints at once, oversized sources and wrong shapes are 400s.
std::optional<ApiError> ParseStructuredOutputs(const Json& body, const ServerLimits& limits, bool is_chat,
                                               StructuredRequest* out);

// tool_choice and parallel_tool_calls (chat).
std::optional<ApiError> ParseToolChoice(const Json& body, ToolChoice* out);

// A forced tool call (kRequired, kNamed) as a grammar over `tools` (the request's validated
// tools array); the named tool must be one of them. Combining it with another constraint
// is a 400.
std::optional<ApiError> ApplyToolChoice(const ToolChoice& choice, const Json& tools, StructuredRequest* out);

// Maps a GrammarEngine::Compile failure to the client's error (fixed messages naming the
// field; the library's reason is not echoed).
ApiError GrammarError(const Status& status, const StructuredRequest& request);

}  // namespace peregrine::server
