// Fuzzes the Jinja subset: the input is template text, rendered against a fixed chat context
// under tight limits. Any outcome is fine except a crash, a hang, or an output past the cap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/jinja_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json* const kContext = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "use the tool",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18C"},
      {"role": "assistant", "content": "<think>x</think>It is 18C.", "prefix": true}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "thinking": true,
    "numbers": [0, -1, 2.5, 9223372036854775807], "text": "héllo 😀"
  })"));
  peregrine::chat::JinjaLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1u << 20;
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = peregrine::chat::JinjaTemplate::Parse(source);
  if (!tmpl.ok()) return 0;
  auto out = tmpl->Render(*kContext, limits);
  if (out.ok() && out->size() > limits.max_output_bytes) std::abort();
  return 0;
}
