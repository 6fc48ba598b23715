// ParseCompletionRequest: the /v1/completions body.
#include <string>
#include <utility>

#include "server/openai_fields.h"
#include "server/openai_request.h"

namespace peregrine::server {
namespace {

std::optional<ApiError> ReadPrompts(const Json& body, const ParseContext& context,
                                    std::vector<CompletionPrompt>* out) {
  const Json* prompt = FindField(body, "prompt");
  if (prompt == nullptr) return InvalidRequest("'prompt' is required.", "prompt", "missing_field");
  const ApiError empty = InvalidRequest("'prompt' must not be empty.", "prompt");
  const ApiError shape = InvalidRequest(
      "'prompt' must be a string, an array of strings, an array of token ids or an array of "
      "token id arrays.", "prompt");
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) return empty;
    out->push_back({true, prompt->get<std::string>(), {}});
    return std::nullopt;
  }
  if (!prompt->is_array()) return shape;
  if (prompt->empty()) return empty;
  const Json& first = prompt->front();
  if (first.is_number()) {  // one prompt of token ids
    CompletionPrompt p{false, {}, {}};
    if (auto e = ReadTokenIdArray(*prompt, "prompt", context.vocab_size, &p.token_ids)) return e;
    out->push_back(std::move(p));
    return std::nullopt;
  }
  if (prompt->size() > static_cast<size_t>(context.config->limits.max_choices)) {
    return InvalidRequest("'prompt' has too many entries.", "prompt");
  }
  const bool strings = first.is_string();
  if (!strings && !first.is_array()) return shape;
  for (const Json& item : *prompt) {
    if (strings) {
      if (!item.is_string()) return shape;
      if (item.get_ref<const std::string&>().empty()) return empty;
      out->push_back({true, item.get<std::string>(), {}});
      continue;
    }
    if (!item.is_array()) return shape;
    if (item.empty()) return empty;
    CompletionPrompt p{false, {}, {}};
    if (auto e = ReadTokenIdArray(item, "prompt", context.vocab_size, &p.token_ids)) return e;
    out->push_back(std::move(p));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseCompletionRequest(Json body, const ParseContext& context,
                                               CompletionRequest* out) {
  GenerationOptions& options = out->options;
  if (auto e = ParseGenerationOptions(body, context, /*is_chat=*/false, &options)) return e;
  if (const Json* suffix = FindField(body, "suffix")) {
    if (!suffix->is_string() || !suffix->get_ref<const std::string&>().empty()) {
      return InvalidRequest("'suffix' is not supported by this server.", "suffix");
    }
  }
  if (auto e = ReadBool(body, "echo", &out->echo)) return e;
  if (!options.max_tokens) options.max_tokens = 16;  // the OpenAI default for completions
  if (*options.max_tokens == 0 && !out->echo) {
    return InvalidRequest("'max_tokens' must be at least 1 unless 'echo' is true.",
                          "max_tokens");
  }
  std::optional<int64_t> logprobs;
  if (auto e = ReadInt(body, "logprobs", 0, kMaxTopLogprobs, &logprobs)) return e;
  if (logprobs) {
    options.sampling.logprobs = static_cast<int32_t>(*logprobs);
    out->echo_logprobs = out->echo;
  }
  // Bound the prompt count before reading them: prompts x n choices are allocated later.
  const Json* prompt = FindField(body, "prompt");
  if (prompt != nullptr && prompt->is_array() && !prompt->empty() &&
      !prompt->front().is_number() &&
      prompt->size() * static_cast<size_t>(options.n) >
          static_cast<size_t>(context.config->limits.max_choices)) {
    return InvalidRequest("Too many choices: prompts times 'n' exceeds the limit.", "n");
  }
  if (auto e = ReadPrompts(body, context, &out->prompts)) return e;
  Status valid = ValidateSamplingParams(options.sampling, context.vocab_size);
  if (!valid.ok()) return InvalidRequest(valid.message());
  return std::nullopt;
}

}  // namespace peregrine::server
