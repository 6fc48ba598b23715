#include "chat/v4_format.h"

#include "chat/jinja_json.h"

namespace peregrine::chat::v4 {
namespace {

// Model data, verbatim from the reference encoder of the April 2026 release.
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

}  // namespace

std::string_view ReasoningEffortMaxParagraph() { return kReasoningEffortMax; }

Result<std::string> ToJson(const nlohmann::ordered_json& value) { return PyJsonDumps(value); }

Result<std::string> RenderToolsBlock(const std::vector<nlohmann::ordered_json>& functions) {
  std::string out(kToolsHead);
  for (size_t i = 0; i < functions.size(); ++i) {
    if (i > 0) out += '\n';
    PG_ASSIGN_OR_RETURN(std::string line, ToJson(functions[i]));
    out += line;
  }
  out += kToolsTail;
  return out;
}

Result<std::string> RenderResponseFormatBlock(const nlohmann::ordered_json& response_format) {
  PG_ASSIGN_OR_RETURN(std::string schema, ToJson(response_format));
  return std::string(kResponseFormatHead) + schema;
}

Result<std::string> RenderToolCallsBlock(const std::vector<ToolCall>& calls) {
  std::string out = "\n\n<";
  out += kDsml;
  out += "tool_calls>\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    const ToolCall& call = calls[i];
    if (i > 0) out += '\n';
    out += '<';
    out += kDsml;
    out += "invoke name=\"" + call.name + "\">\n";
    bool first = true;
    for (auto it = call.arguments.begin(); it != call.arguments.end(); ++it) {
      if (!first) out += '\n';
      first = false;
      bool is_string = it.value().is_string();
      out += '<';
      out += kDsml;
      out += "parameter name=\"" + it.key() + "\" string=\"" + (is_string ? "true" : "false") + "\">";
      if (is_string) {
        out += it.value().get_ref<const std::string&>();
      } else {
        PG_ASSIGN_OR_RETURN(std::string json, ToJson(it.value()));
        out += json;
      }
      out += "</";
      out += kDsml;
      out += "parameter>";
    }
    out += "\n</";
    out += kDsml;
    out += "invoke>";
  }
  out += "\n</";
  out += kDsml;
  out += "tool_calls>";
  return out;
}

}  // namespace peregrine::chat::v4
