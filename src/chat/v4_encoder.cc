#include "chat/v4_encoder.h"

#include <exception>
#include <vector>

#include "chat/v4_format.h"
#include "chat/v4_messages.h"

namespace peregrine::chat {
namespace {

using v4::Message;
using v4::Role;

struct RenderState {
  const std::vector<Message>& messages;
  const V4EncodeOptions& options;
  bool drop_thinking;  // after the "tools present" override
  int last_user;
};

Status AppendSystemExtras(const Message& m, std::string& out) {
  if (!m.tools.empty()) {
    PG_ASSIGN_OR_RETURN(std::string block, v4::RenderToolsBlock(m.tools));
    out += "\n\n" + block;
  }
  if (!m.response_format.is_null()) {
    PG_ASSIGN_OR_RETURN(std::string block, v4::RenderResponseFormatBlock(m.response_format));
    out += "\n\n" + block;
  }
  return Status::Ok();
}

void AppendUserTurn(const Message& m, std::string& out) {
  out += v4::kUser;
  if (m.blocks.empty()) {
    out += m.content;
    return;
  }
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    if (i > 0) out += "\n\n";
    const v4::ContentBlock& b = m.blocks[i];
    if (b.is_tool_result) {
      out += "<tool_result>" + b.text + "</tool_result>";
    } else {
      out += b.text;
    }
  }
}

Status AppendAssistantTurn(const RenderState& s, size_t index, const Message& m, std::string& out) {
  const bool is_continued = s.options.continue_final_message && index + 1 == s.messages.size();
  if (s.options.thinking && (!s.drop_thinking || static_cast<int>(index) > s.last_user)) {
    out += m.reasoning;
    // A continued turn with nothing after its reasoning is still thinking.
    if (!is_continued || !m.content.empty() || !m.tool_calls.empty()) out += v4::kThinkEnd;
  }
  out += m.content;
  if (!m.tool_calls.empty()) {
    PG_ASSIGN_OR_RETURN(std::string block, v4::RenderToolCallsBlock(m.tool_calls));
    out += block;
  }
  if (!is_continued) out += v4::kEos;
  return Status::Ok();
}

Status RenderMessage(const RenderState& s, size_t index, std::string& out) {
  const Message& m = s.messages[index];
  if (index == 0 && s.options.thinking && s.options.reasoning_effort == V4ReasoningEffort::kMax)
    out += v4::ReasoningEffortMaxParagraph();

  switch (m.role) {
    case Role::kSystem:
      out += m.content;
      PG_RETURN_IF_ERROR(AppendSystemExtras(m, out));
      break;
    case Role::kDeveloper:
      out += v4::kUser;
      out += m.content;
      PG_RETURN_IF_ERROR(AppendSystemExtras(m, out));
      break;
    case Role::kUser:
      AppendUserTurn(m, out);
      break;
    case Role::kLatestReminder:
      out += v4::kLatestReminder;
      out += m.content;
      break;
    case Role::kAssistant:
      PG_RETURN_IF_ERROR(AppendAssistantTurn(s, index, m, out));
      break;
    case Role::kTool:
      return Internal("tool message survived merging");
  }

  // The assistant header follows a user turn only when an assistant turn, a reminder or the
  // generation itself comes next.
  bool is_last = index + 1 == s.messages.size();
  if (!is_last) {
    Role next = s.messages[index + 1].role;
    if (next != Role::kAssistant && next != Role::kLatestReminder) return Status::Ok();
  }
  if (m.role != Role::kUser && m.role != Role::kDeveloper) return Status::Ok();
  if (is_last && !s.options.add_generation_prompt) return Status::Ok();
  out += v4::kAssistant;
  bool open_thinking = s.options.thinking && (!s.drop_thinking || static_cast<int>(index) >= s.last_user);
  out += open_thinking ? v4::kThinkStart : v4::kThinkEnd;
  return Status::Ok();
}

Result<std::string> Encode(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                           const V4EncodeOptions& options) {
  PG_ASSIGN_OR_RETURN(std::vector<Message> parsed, v4::ParseMessages(messages, tools));
  if (options.continue_final_message &&
      (options.add_generation_prompt || parsed.empty() || parsed.back().role != Role::kAssistant)) {
    return InvalidArgument(
        "continue_final_message needs an assistant message last and no generation prompt");
  }
  std::vector<Message> merged = v4::MergeToolMessages(std::move(parsed));
  v4::SortToolResults(merged);

  bool drop_thinking = options.drop_thinking;
  for (const Message& m : merged)
    if (!m.tools.empty()) drop_thinking = false;  // interleaved thinking across tool calls
  if (options.thinking && drop_thinking) merged = v4::DropThinking(std::move(merged));

  RenderState state{merged, options, drop_thinking, v4::LastUserIndex(merged)};
  std::string out(v4::kBos);
  for (size_t i = 0; i < merged.size(); ++i) PG_RETURN_IF_ERROR(RenderMessage(state, i, out));
  return out;
}

}  // namespace

Result<V4ReasoningEffort> ParseV4ReasoningEffort(std::string_view text) {
  if (text.empty() || text == "none" || text == "low" || text == "medium") return V4ReasoningEffort::kNone;
  if (text == "high") return V4ReasoningEffort::kHigh;
  if (text == "max") return V4ReasoningEffort::kMax;
  return InvalidArgument("reasoning_effort must be one of none, low, medium, high, max");
}

Result<std::string> EncodeV4Prompt(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                   const V4EncodeOptions& options) {
  try {
    return Encode(messages, tools, options);
  } catch (const std::exception&) {
    return Internal("prompt encoding failed on malformed JSON");
  }
}

}  // namespace peregrine::chat
