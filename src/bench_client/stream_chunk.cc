#include "bench_client/stream_chunk.h"

#include <nlohmann/json.hpp>

namespace peregrine::bench_client {

namespace {

using Json = nlohmann::json;

bool IsNonEmptyString(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool ChoiceHasOutput(const Json& choice) {
  if (!choice.is_object()) return false;
  if (IsNonEmptyString(choice, "text")) return true;
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return false;
  if (IsNonEmptyString(*delta, "content") || IsNonEmptyString(*delta, "reasoning_content") ||
      IsNonEmptyString(*delta, "reasoning")) {
    return true;
  }
  auto tools = delta->find("tool_calls");
  return tools != delta->end() && tools->is_array() && !tools->empty();
}

std::optional<int64_t> IntField(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

Result<StreamChunk> ParseStreamChunk(std::string_view data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.is_done = true;
    return chunk;
  }
  const Json json = Json::parse(data, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return DataLoss("stream chunk is not a JSON object: " + std::string(data.substr(0, 200)));
  }
  if (auto error = json.find("error"); error != json.end() && !error->is_null()) {
    auto message = error->is_object() ? error->find("message") : error->end();
    chunk.error = message != error->end() && message->is_string() ? message->get<std::string>() : error->dump();
    if (chunk.error.empty()) chunk.error = "server sent an error chunk";
  }
  if (auto choices = json.find("choices"); choices != json.end() && choices->is_array()) {
    for (const Json& choice : *choices) chunk.has_text = chunk.has_text || ChoiceHasOutput(choice);
  }
  if (auto usage = json.find("usage"); usage != json.end() && usage->is_object()) {
    chunk.prompt_tokens = IntField(*usage, "prompt_tokens");
    chunk.completion_tokens = IntField(*usage, "completion_tokens");
  }
  return chunk;
}

}  // namespace peregrine::bench_client
