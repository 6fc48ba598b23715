#include "chat/v4_messages.h"

#include <algorithm>
#include <map>
#include <utility>

#include "chat/jinja_pystr.h"

namespace peregrine::chat::v4 {
namespace {

using Json = nlohmann::ordered_json;

// Python truthiness of a JSON value (the reference encoder tests fields with `if value:`).
bool IsTruthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return v.get<bool>();
    case Json::value_t::number_integer: return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case Json::value_t::number_float: return v.get<double>() != 0.0;
    case Json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object: return !v.empty();
    case Json::value_t::binary:
    case Json::value_t::discarded: return false;
  }
  return false;
}

const Json* Field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

Result<Role> ParseRole(const Json& message) {
  const Json* role = Field(message, "role");
  if (role == nullptr || !role->is_string()) return InvalidArgument("message role must be a string");
  const std::string& r = role->get_ref<const std::string&>();
  if (r == "system") return Role::kSystem;
  if (r == "user") return Role::kUser;
  if (r == "developer") return Role::kDeveloper;
  if (r == "assistant") return Role::kAssistant;
  if (r == "tool") return Role::kTool;
  if (r == "latest_reminder") return Role::kLatestReminder;
  return InvalidArgument("unknown message role");
}

// String, null, or text parts joined with "\n".
Result<std::string> ParseContent(const Json* content) {
  if (content == nullptr || content->is_null()) return std::string();
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array())
    return InvalidArgument("message content must be a string, an array of text parts or null");
  std::string out;
  bool first = true;
  for (const Json& part : *content) {
    const Json* type = part.is_object() ? Field(part, "type") : nullptr;
    const Json* text = part.is_object() ? Field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "text" ||
        text == nullptr || !text->is_string())
      return InvalidArgument("unsupported message content part");
    if (!first) out += '\n';
    first = false;
    out += text->get_ref<const std::string&>();
  }
  return out;
}

Result<std::vector<Json>> ParseTools(const Json& tools) {
  std::vector<Json> functions;
  if (tools.is_null()) return functions;
  if (!tools.is_array()) return InvalidArgument("tools must be an array");
  for (const Json& tool : tools) {
    const Json* function = tool.is_object() ? Field(tool, "function") : nullptr;
    if (function == nullptr || !function->is_object())
      return InvalidArgument("tool definition must have a function object");
    functions.push_back(*function);
  }
  return functions;
}

Result<Json> ParseArguments(const Json* arguments) {
  if (arguments == nullptr || arguments->is_null()) return Json::object();
  if (arguments->is_object()) return *arguments;
  if (!arguments->is_string()) return InvalidArgument("tool call arguments must be a JSON object");
  std::string text = PyStrip(arguments->get_ref<const std::string&>(), nullptr, true, true);
  if (text.empty()) return Json::object();
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return InvalidArgument("tool call arguments must be a JSON object");
  return parsed;
}

Result<std::vector<ToolCall>> ParseToolCalls(const Json* tool_calls) {
  std::vector<ToolCall> calls;
  if (tool_calls == nullptr || tool_calls->is_null()) return calls;
  if (!tool_calls->is_array()) return InvalidArgument("tool_calls must be an array");
  for (const Json& call : *tool_calls) {
    const Json* function = call.is_object() ? Field(call, "function") : nullptr;
    if (function == nullptr || !function->is_object())
      return InvalidArgument("tool call must have a function object");
    const Json* name = Field(*function, "name");
    if (name == nullptr || !name->is_string()) return InvalidArgument("tool call must have a name");
    ToolCall parsed;
    parsed.name = name->get<std::string>();
    PG_ASSIGN_OR_RETURN(parsed.arguments, ParseArguments(Field(*function, "arguments")));
    const Json* id = Field(call, "id");
    if (id == nullptr || !id->is_string() || id->get_ref<const std::string&>().empty())
      id = Field(*function, "id");
    if (id != nullptr && id->is_string()) parsed.id = id->get<std::string>();
    calls.push_back(std::move(parsed));
  }
  return calls;
}

Result<Message> ParseMessage(const Json& json) {
  if (!json.is_object()) return InvalidArgument("message must be a JSON object");
  Message m;
  PG_ASSIGN_OR_RETURN(m.role, ParseRole(json));
  PG_ASSIGN_OR_RETURN(m.content, ParseContent(Field(json, "content")));
  if (const Json* tools = Field(json, "tools"); tools != nullptr) {
    PG_ASSIGN_OR_RETURN(m.tools, ParseTools(*tools));
  }
  if (const Json* format = Field(json, "response_format"); format != nullptr && IsTruthy(*format))
    m.response_format = *format;
  if (m.role == Role::kDeveloper && m.content.empty())
    return InvalidArgument("developer message needs non-empty content");
  if (m.role == Role::kAssistant) {
    const Json* reasoning = Field(json, "reasoning_content");
    if (reasoning != nullptr && !reasoning->is_null()) {
      if (!reasoning->is_string()) return InvalidArgument("reasoning_content must be a string");
      m.reasoning = reasoning->get<std::string>();
    }
    PG_ASSIGN_OR_RETURN(m.tool_calls, ParseToolCalls(Field(json, "tool_calls")));
  }
  if (m.role == Role::kTool) {
    const Json* id = Field(json, "tool_call_id");
    if (id != nullptr && !id->is_null()) {
      if (!id->is_string()) return InvalidArgument("tool_call_id must be a string");
      m.tool_call_id = id->get<std::string>();
    }
  }
  return m;
}

}  // namespace

Result<std::vector<Message>> ParseMessages(const Json& messages, const Json& tools) {
  if (!messages.is_array()) return InvalidArgument("messages must be an array");
  if (messages.empty()) return InvalidArgument("messages must not be empty");
  std::vector<Message> out;
  out.reserve(messages.size() + 1);
  for (const Json& json : messages) {
    PG_ASSIGN_OR_RETURN(Message m, ParseMessage(json));
    out.push_back(std::move(m));
  }
  PG_ASSIGN_OR_RETURN(std::vector<Json> functions, ParseTools(tools));
  if (!functions.empty()) {
    if (out.front().role != Role::kSystem) {
      Message system;
      system.role = Role::kSystem;
      out.insert(out.begin(), std::move(system));
    }
    out.front().tools = std::move(functions);
  }
  return out;
}

std::vector<Message> MergeToolMessages(std::vector<Message> messages) {
  std::vector<Message> merged;
  merged.reserve(messages.size());
  auto last_is_user_turn = [&] {
    return !merged.empty() && merged.back().role == Role::kUser && !merged.back().blocks.empty();
  };
  for (Message& m : messages) {
    if (m.role == Role::kTool) {
      ContentBlock block{true, std::move(m.content), std::move(m.tool_call_id)};
      if (!last_is_user_turn()) {
        Message turn;
        turn.role = Role::kUser;
        merged.push_back(std::move(turn));
      }
      merged.back().blocks.push_back(std::move(block));
    } else if (m.role == Role::kUser) {
      ContentBlock block{false, m.content, {}};
      if (!last_is_user_turn()) {
        Message turn;  // a user turn keeps only its text (the reference drops other fields)
        turn.role = Role::kUser;
        turn.content = std::move(m.content);
        merged.push_back(std::move(turn));
      }
      merged.back().blocks.push_back(std::move(block));
    } else {
      merged.push_back(std::move(m));
    }
  }
  return merged;
}

void SortToolResults(std::vector<Message>& messages) {
  std::map<std::string, size_t> call_order;
  for (Message& m : messages) {
    if (m.role == Role::kAssistant && !m.tool_calls.empty()) {
      call_order.clear();
      for (size_t i = 0; i < m.tool_calls.size(); ++i)
        if (!m.tool_calls[i].id.empty()) call_order[m.tool_calls[i].id] = i;
    } else if (m.role == Role::kUser && !m.blocks.empty()) {
      std::vector<ContentBlock> results;
      for (const ContentBlock& b : m.blocks)
        if (b.is_tool_result) results.push_back(b);
      if (results.size() < 2 || call_order.empty()) continue;
      auto rank = [&](const ContentBlock& b) {
        auto it = call_order.find(b.tool_use_id);
        return it == call_order.end() ? size_t{0} : it->second;  // unknown ids rank first
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const ContentBlock& a, const ContentBlock& b) { return rank(a) < rank(b); });
      size_t next = 0;
      for (ContentBlock& b : m.blocks)
        if (b.is_tool_result) b = std::move(results[next++]);
    }
  }
}

int LastUserIndex(const std::vector<Message>& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    Role r = messages[static_cast<size_t>(i)].role;
    if (r == Role::kUser || r == Role::kDeveloper) return i;
  }
  return -1;
}

std::vector<Message> DropThinking(std::vector<Message> messages) {
  int last_user = LastUserIndex(messages);
  std::vector<Message> kept;
  kept.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    Message& m = messages[i];
    bool always_kept = m.role == Role::kUser || m.role == Role::kSystem || m.role == Role::kTool ||
                       m.role == Role::kLatestReminder;
    if (always_kept || static_cast<int>(i) >= last_user) {
      kept.push_back(std::move(m));
    } else if (m.role == Role::kAssistant) {
      m.reasoning.clear();
      kept.push_back(std::move(m));
    }
    // Developer messages before the last user message are dropped.
  }
  return kept;
}

}  // namespace peregrine::chat::v4
