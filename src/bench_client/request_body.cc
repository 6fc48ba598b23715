#include "bench_client/request_body.h"

#include <nlohmann/json.hpp>

namespace peregrine::bench_client {

ApiKind ApiKindForEndpoint(std::string_view endpoint) {
  while (endpoint.ends_with('/')) endpoint.remove_suffix(1);
  return endpoint.ends_with("/chat/completions") ? ApiKind::kChatCompletions : ApiKind::kCompletions;
}

std::string BuildRequestBody(ApiKind kind, std::string_view model, const PromptSpec& spec, bool ignore_eos,
                             std::string_view extra_body) {
  nlohmann::json body = nlohmann::json::object();
  if (!model.empty()) body["model"] = model;
  switch (kind) {
    case ApiKind::kCompletions:
      body["prompt"] = spec.prompt;
      break;
    case ApiKind::kChatCompletions:
      body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", spec.prompt}}});
      break;
  }
  body["max_tokens"] = spec.output_len;
  body["temperature"] = 0.0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (ignore_eos) body["ignore_eos"] = true;
  if (!extra_body.empty()) {
    const nlohmann::json extra = nlohmann::json::parse(extra_body, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object())
      for (const auto& [key, value] : extra.items()) body[key] = value;
  }
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace peregrine::bench_client
