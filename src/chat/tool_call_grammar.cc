#include "chat/tool_call_grammar.h"

#include "chat/v4_format.h"

namespace peregrine::chat {

using Json = nlohmann::ordered_json;

Result<std::string> DsmlToolCallStructuralTag(const std::vector<GrammarTool>& tools, bool parallel,
                                              int max_whitespace) {
  if (tools.empty()) return InvalidArgument("a forced tool call needs at least one tool");
  const std::string dsml(v4::kDsml);
  Json tags = Json::array();
  for (const GrammarTool& tool : tools) {
    if (tool.name.empty() || tool.name.find_first_of("\"<>\n") != std::string::npos)
      return InvalidArgument("tool names used in a forced tool call must be non-empty and free of quotes, "
                             "angle brackets and newlines");
    Json schema = tool.parameters;
    if (schema.is_null()) schema = Json{{"type", "object"}};
    if (!schema.is_object()) return InvalidArgument("tool '" + tool.name + "': parameters must be a JSON schema object");
    Json content = {{"type", "json_schema"}, {"json_schema", schema}, {"style", "deepseek_xml"}};
    if (max_whitespace >= 0) content["max_whitespace_cnt"] = max_whitespace;
    tags.push_back(Json{{"type", "tag"},
                        {"begin", "<" + dsml + "invoke name=\"" + tool.name + "\">\n"},
                        {"content", std::move(content)},
                        {"end", "\n</" + dsml + "invoke>"}});
  }
  const Json format = {
      {"type", "sequence"},
      {"elements", Json::array({Json{{"type", "const_string"}, {"value", "\n\n<" + dsml + "tool_calls>\n"}},
                                Json{{"type", "tags_with_separator"},
                                     {"tags", tags},
                                     {"separator", "\n"},
                                     {"at_least_one", true},
                                     {"stop_after_first", !parallel}},
                                Json{{"type", "const_string"}, {"value", "\n</" + dsml + "tool_calls>"}}})}};
  return Json{{"type", "structural_tag"}, {"format", format}}.dump();
}

}  // namespace peregrine::chat
