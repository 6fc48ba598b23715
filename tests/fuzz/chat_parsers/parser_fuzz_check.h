// Shared checks for the output-parser fuzz targets: each input is parsed whole and under several
// splits derived from the input itself; any difference (or a broken invariant) aborts, so the
// fuzzer reports the input as a crash.
#pragma once

#include <string_view>

#include "chat/output_parser.h"

namespace peregrine::chat {

void CheckReasoningSplits(const ReasoningParserOptions& options, std::string_view text);
void CheckToolCallSplits(ToolCallDialect dialect, std::string_view text);
void CheckOutputSplits(const OutputParserConfig& config, std::string_view text);

}  // namespace peregrine::chat
