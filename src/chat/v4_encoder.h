// DeepSeek-V4 prompt encoder: OpenAI-shaped chat messages -> prompt text, following the reference
// encoder (`encoding/encoding_dsv4.py` of the April 2026 DeepSeek-V4 release; see
// shared design deepseek-v4.md §7.2). The prompt keeps special tokens as text (BOS first);
// tokenization happens elsewhere.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::chat {

// "max" prepends a fixed paragraph in thinking mode; "high" is accepted and, in the release this
// encoder targets, adds nothing.
enum class V4ReasoningEffort { kNone, kHigh, kMax };

// "" / "none" / "low" / "medium" -> kNone (the OpenAI default "medium" has no V4 meaning),
// "high", "max"; anything else is kInvalidArgument.
Result<V4ReasoningEffort> ParseV4ReasoningEffort(std::string_view text);

struct V4EncodeOptions {
  bool thinking = false;  // thinking mode (<｜Assistant｜><think>) or chat mode (</think>)
  V4ReasoningEffort reasoning_effort = V4ReasoningEffort::kNone;
  // Remove the reasoning of assistant turns before the last user message (thinking mode only).
  // Ignored (nothing dropped) when any message carries tools.
  bool drop_thinking = true;
  // When false, a conversation that ends with a user turn gets no trailing
  // "<｜Assistant｜>" + think token.
  bool add_generation_prompt = true;
  // The last message is an assistant turn left open: no end-of-sentence after it, so the
  // model continues it (and, in thinking mode, a turn with only reasoning keeps the thinking
  // block open). Requires add_generation_prompt false and an assistant message last.
  bool continue_final_message = false;
};

// `messages`: array of {"role", "content", ...} objects. Roles: system, user, developer,
// assistant (with optional "reasoning_content" and OpenAI "tool_calls"), tool (with
// "tool_call_id"), latest_reminder. Content is a string, null, or an array of
// {"type":"text","text":...} parts (joined with "\n"). System and developer messages may carry
// "tools" and "response_format" themselves.
// `tools`: null or the request's OpenAI tool list; it is attached to the first message when that
// is a system message, otherwise to a new empty system message placed first.
// Object key order is kept (ordered_json), since tool schemas are printed as given.
//
// Errors (kInvalidArgument, fixed messages): malformed messages, unknown roles, empty developer
// content, tool calls without a name or whose arguments are not a JSON object, malformed tools,
// continue_final_message without an assistant message last.
// Never throws.
Result<std::string> EncodeV4Prompt(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& tools,
                                   const V4EncodeOptions& options);

}  // namespace peregrine::chat
