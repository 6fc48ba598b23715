#include "chat/output_parser.h"

#include <utility>

namespace peregrine::chat {
namespace {

ToolCallDialect ToolDialectOf(ModelDialect dialect) {
  switch (dialect) {
    case ModelDialect::kDeepSeekV4:
      return ToolCallDialect::kDsmlV4;
    case ModelDialect::kDeepSeekV32:
      return ToolCallDialect::kDsmlV32;
    case ModelDialect::kDeepSeekV31:
      return ToolCallDialect::kV31;
    case ModelDialect::kDeepSeekV3:
      return ToolCallDialect::kV3;
  }
  return ToolCallDialect::kDsmlV4;
}

bool IsDsml(ModelDialect dialect) {
  return dialect == ModelDialect::kDeepSeekV4 || dialect == ModelDialect::kDeepSeekV32;
}

ReasoningParserOptions ReasoningOptionsOf(const OutputParserConfig& config) {
  ReasoningParserOptions options;
  options.starts_in_reasoning = config.thinking;
  if (config.has_tools && IsDsml(config.dialect)) {
    options.tool_block_opener = ToolBlockOpener(ToolDialectOf(config.dialect));
    options.tool_invoke_opener = "<｜DSML｜invoke";
  }
  return options;
}

void Append(ToolCallParserDelta&& from, OutputDelta* to) {
  to->content += from.content;
  for (auto& d : from.tool_calls) to->tool_calls.push_back(std::move(d));
}

}  // namespace

OutputParser::OutputParser(OutputParserConfig config) : reasoning_(ReasoningOptionsOf(config)) {
  if (config.has_tools) {
    tools_.emplace(ToolCallParserOptions{ToolDialectOf(config.dialect), config.tool_call_ids,
                                         config.validate_tool_calls, std::move(config.tools)});
  }
}

OutputDelta OutputParser::Feed(std::string_view piece) {
  ReasoningDelta split = reasoning_.Feed(piece);
  OutputDelta out;
  out.reasoning_content = std::move(split.reasoning_content);
  if (!tools_) {
    out.content = std::move(split.content);
  } else if (!split.content.empty()) {
    Append(tools_->Feed(split.content), &out);
  }
  return out;
}

OutputDelta OutputParser::Finish() {
  ReasoningDelta split = reasoning_.Finish();
  OutputDelta out;
  out.reasoning_content = std::move(split.reasoning_content);
  if (!tools_) {
    out.content = std::move(split.content);
    return out;
  }
  if (!split.content.empty()) Append(tools_->Feed(split.content), &out);
  Append(tools_->Finish(), &out);
  return out;
}

ParsedOutput ParseOutput(std::string_view text, const OutputParserConfig& config) {
  OutputParser parser(config);
  ParsedOutput message;
  AppendOutputDelta(parser.Feed(text), &message);
  AppendOutputDelta(parser.Finish(), &message);
  return message;
}

void AppendOutputDelta(const OutputDelta& delta, ParsedOutput* message) {
  message->reasoning_content += delta.reasoning_content;
  message->content += delta.content;
  AppendToolCallDeltas(delta.tool_calls, &message->tool_calls);
}

}  // namespace peregrine::chat
