// A sandboxed subset of Jinja, enough for Hugging Face chat templates (DeepSeek V3/V3.1/V3.2 and
// the usual Llama/Qwen/Mistral shapes). It renders byte-identically to Python jinja2 configured as
// transformers' apply_chat_template configures it (trim_blocks, lstrip_blocks, loop controls,
// raise_exception, strftime_now, a json.dumps-based tojson) for the constructs it supports.
//
// Sandbox: templates read data keys and a fixed set of string/dict methods only; names starting
// with "_" are refused, there is no file, import or environment access, and every render runs
// under a step budget, a macro call-depth limit and an output size cap. All failures are Status
// values; nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::chat {

namespace jinja {
struct Node;
}  // namespace jinja

struct JinjaLimits {
  // Nodes evaluated, loop iterations (weighted) and builtin work; the default is roughly 0.1 s
  // of rendering, far above what chat templates need for thousands of messages.
  int64_t max_steps = 1'000'000;
  int max_call_depth = 16;                  // nested macro calls
  size_t max_output_bytes = 8u << 20;       // rendered text and any string built on the way
};

class JinjaTemplate {
 public:
  // kInvalidArgument ("template syntax error at line N: ...") for anything outside the subset.
  static Result<JinjaTemplate> Parse(std::string_view source);

  // Renders with the members of `context` (a JSON object) as variables. Errors:
  // kInvalidArgument for template runtime errors (bad operand types, unsafe attribute access,
  // raise_exception), kResourceExhausted when a limit trips.
  Result<std::string> Render(const nlohmann::ordered_json& context, const JinjaLimits& limits = {}) const;

  struct Body;  // the parsed tree; defined in jinja_template.cc

 private:
  std::shared_ptr<const Body> body_;
};

// The variables Hugging Face passes to a chat template: messages, tools (none unless an array),
// documents (none), add_generation_prompt, plus every member of `extra` (special tokens
// such as bos_token/eos_token, and chat_template_kwargs such as thinking).
Result<std::string> RenderChatTemplate(const JinjaTemplate& tmpl, const nlohmann::ordered_json& messages,
                                       const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                       const nlohmann::ordered_json& extra, const JinjaLimits& limits = {});

}  // namespace peregrine::chat
