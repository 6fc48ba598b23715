// Fuzzes the DeepSeek-V4 encoder with arbitrary JSON: either a messages array or a request
// object {"messages", "tools", "options"}. Option bits also come from the input's first byte.
// Any Status is fine; a crash or an escaping exception is not.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/v4_encoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using Json = nlohmann::ordered_json;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Json input = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded()) return 0;
  Json messages = input;
  Json tools;
  peregrine::chat::V4EncodeOptions options;
  uint8_t bits = size > 0 ? data[0] : 0;
  options.thinking = (bits & 1) != 0;
  options.drop_thinking = (bits & 2) == 0;
  options.add_generation_prompt = (bits & 4) == 0;
  options.reasoning_effort = (bits & 8) ? peregrine::chat::V4ReasoningEffort::kMax
                                        : peregrine::chat::V4ReasoningEffort::kNone;
  if (input.is_object()) {
    messages = input.contains("messages") ? input["messages"] : Json();
    if (input.contains("tools")) tools = input["tools"];
    if (input.contains("options") && input["options"].is_object()) {
      const Json& o = input["options"];
      if (o.contains("thinking") && o["thinking"].is_boolean()) options.thinking = o["thinking"].get<bool>();
      if (o.contains("drop_thinking") && o["drop_thinking"].is_boolean())
        options.drop_thinking = o["drop_thinking"].get<bool>();
    }
  }
  auto prompt = peregrine::chat::EncodeV4Prompt(messages, tools, options);
  (void)prompt;
  return 0;
}
