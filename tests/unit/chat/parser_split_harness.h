// Test harness for the output parsers: runs one input through OutputParser under many splits
// and checks that every split assembles to the whole-text result, and that the streamed deltas
// have the OpenAI shape.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_parser.h"

namespace peregrine::chat {

// Inputs up to this many bytes are also checked at every pair of split points.
inline constexpr size_t kMaxPairSplitBytes = 160;

// Feeds `text` cut at the (sorted) byte offsets `cuts`, then Finish(); assembles the message and
// checks the delta shape (first delta of a call: index, id, name, empty arguments; later ones:
// non-empty arguments only; indices in order).
::testing::AssertionResult RunPieces(const OutputParserConfig& config, std::string_view text,
                                     const std::vector<size_t>& cuts, ParsedOutput* message);

// The whole-text result in `*whole`, after checking that every single split, every pair of
// splits (short inputs), and byte-by-byte feeding give exactly the same message.
::testing::AssertionResult CheckAllSplits(const OutputParserConfig& config, std::string_view text,
                                          ParsedOutput* whole);

// CheckAllSplits as a test expectation; returns the whole-text result.
ParsedOutput ParseAllSplits(const OutputParserConfig& config, std::string_view text);

// Configuration shorthands (ids from a counter: call_0, call_1, ...).
OutputParserConfig ChatConfig(ModelDialect dialect, bool has_tools);
OutputParserConfig ThinkingConfig(ModelDialect dialect, bool has_tools);

std::string Describe(const ParsedOutput& message);
inline void PrintTo(const ParsedOutput& message, std::ostream* os) { *os << Describe(message); }
inline void PrintTo(const ToolCall& call, std::ostream* os) {
  *os << "{" << call.id << ", " << call.name << ", " << call.arguments << "}";
}

}  // namespace peregrine::chat
