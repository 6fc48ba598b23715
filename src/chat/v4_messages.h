// Internal: OpenAI-shaped messages -> the message list the V4 renderer walks, with the reference
// encoder's preprocessing (tool results merged into user turns and sorted by call order, older
// reasoning dropped).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/v4_format.h"

namespace peregrine::chat::v4 {

enum class Role { kSystem, kUser, kDeveloper, kAssistant, kTool, kLatestReminder };

struct ContentBlock {
  bool is_tool_result = false;
  std::string text;         // text, or the tool result
  std::string tool_use_id;  // tool results only
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  std::string tool_call_id;            // kTool only
  std::vector<ContentBlock> blocks;    // user turns after MergeToolMessages
  std::string reasoning;               // kAssistant only
  std::vector<ToolCall> tool_calls;    // kAssistant only
  std::vector<nlohmann::ordered_json> tools;  // function objects; empty when absent
  nlohmann::ordered_json response_format;     // null when absent or falsy
};

// Validates and converts; `tools` (request level) is attached as described in v4_encoder.h.
Result<std::vector<Message>> ParseMessages(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools);

// Tool messages become tool-result blocks of a user turn; consecutive user and tool messages
// share one turn.
std::vector<Message> MergeToolMessages(std::vector<Message> messages);

// Within each user turn, tool results follow the order of the latest assistant's tool calls.
void SortToolResults(std::vector<Message>& messages);

// Index of the last user or developer message, or -1.
int LastUserIndex(const std::vector<Message>& messages);

// Assistant turns before the last user message lose their reasoning; developer messages before it
// are removed.
std::vector<Message> DropThinking(std::vector<Message> messages);

}  // namespace peregrine::chat::v4
