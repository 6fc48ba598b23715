// Fixed text of the DeepSeek-V4 prompt format (special tokens, the tools block, the response
// format block, the reasoning-effort paragraph) and the DSML tool-call rendering. The strings are
// model data: the model was trained on exactly these bytes, so they must not be reworded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::chat::v4 {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// Prepended to the whole prompt for reasoning_effort "max" in thinking mode (April 2026 release).
std::string_view ReasoningEffortMaxParagraph();

// "## Tools ..." block listing `functions` (the `function` objects of OpenAI tool definitions),
// one JSON line each.
Result<std::string> RenderToolsBlock(const std::vector<nlohmann::ordered_json>& functions);

// "## Response Format: ..." block with the JSON of `response_format`.
Result<std::string> RenderResponseFormatBlock(const nlohmann::ordered_json& response_format);

struct ToolCall {
  std::string id;
  std::string name;
  nlohmann::ordered_json arguments;  // always a JSON object
};

// "\n\n<｜DSML｜tool_calls>\n...\n</｜DSML｜tool_calls>" for a non-empty list of calls. String
// arguments are written raw with string="true"; any other value as JSON with string="false".
Result<std::string> RenderToolCallsBlock(const std::vector<ToolCall>& calls);

// JSON as the reference encoder writes it (Python json.dumps, ensure_ascii=False).
Result<std::string> ToJson(const nlohmann::ordered_json& value);

}  // namespace peregrine::chat::v4
