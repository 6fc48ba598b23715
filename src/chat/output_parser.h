// OutputParser: the one object the server uses to turn generated text into an OpenAI chat
// completion message, streaming or not. It chains ReasoningParser (reasoning_content vs the
// rest) and, when the request has tools, ToolCallParser (content vs tool_calls).
//
// Streaming: call Feed with each piece the detokenizer emits, then Finish once; send each
// non-empty OutputDelta as one SSE chunk. Non-streaming: ParseOutput on the whole text. Both
// give the same final message for every split of the text (see README "## Parsers").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"

namespace peregrine::chat {

enum class ModelDialect { kDeepSeekV4, kDeepSeekV32, kDeepSeekV31, kDeepSeekV3 };

struct OutputParserConfig {
  ModelDialect dialect = ModelDialect::kDeepSeekV4;
  // Thinking mode: the prompt ended with "<think>", so output starts inside the reasoning.
  bool thinking = false;
  // The request carried tools: tool-call blocks are parsed (otherwise they stay content), and
  // for DSML dialects an unquoted block opener also ends the reasoning.
  bool has_tools = false;
  // Ids for parsed calls. Serving: ToolCallIdGenerator::Random(per-request random seed).
  ToolCallIdGenerator tool_call_ids;
  // Optional shallow check of calls against the request's tools (see tool_call_parser_schema.h).
  bool validate_tool_calls = false;
  std::vector<ToolSpec> tools;
};

struct OutputDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool is_empty() const {
    return reasoning_content.empty() && content.empty() && tool_calls.empty();
  }
};

struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ParsedOutput&) const = default;
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserConfig config);

  // Consumes the next piece of generated text. Never fails: text that is not understood ends up
  // in content (or reasoning_content) verbatim.
  OutputDelta Feed(std::string_view piece);
  // Ends the stream. Feed must not be called afterwards.
  OutputDelta Finish();

 private:
  ReasoningParser reasoning_;
  std::optional<ToolCallParser> tools_;
};

// Whole-text parsing: what Feed(text) + Finish() assemble to.
ParsedOutput ParseOutput(std::string_view text, const OutputParserConfig& config);

// Folds a delta into the message being assembled (for non-streaming responses and tests).
void AppendOutputDelta(const OutputDelta& delta, ParsedOutput* message);

}  // namespace peregrine::chat
