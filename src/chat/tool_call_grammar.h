// Forced tool calls as a grammar: the xgrammar structural tag (structured/grammar_spec.h,
// kStructuralTag) whose language is a DeepSeek-V4 DSML tool-call block, each invoke naming
// one of `tools` and carrying parameters that follow that tool's JSON schema, exactly as
// v4::RenderToolCallsBlock writes them (string values raw with string="true", the others JSON
// with string="false").
//
// tool_choice "required" passes every tool; a named tool_choice passes that one.
// parallel_tool_calls false allows exactly one invoke, true one or more.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::chat {

struct GrammarTool {
  std::string name;
  nlohmann::ordered_json parameters;  // the tool's JSON schema; null: any object
};

// `max_whitespace` bounds whitespace runs inside the arguments (as JSON grammars bound theirs;
// < 0: unbounded).
Result<std::string> DsmlToolCallStructuralTag(const std::vector<GrammarTool>& tools, bool parallel,
                                              int max_whitespace = -1);

}  // namespace peregrine::chat
