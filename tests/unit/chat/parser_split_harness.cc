#include "parser_split_harness.h"

#include <sstream>

namespace peregrine::chat {
namespace {

std::string DescribeCuts(const std::vector<size_t>& cuts) {
  std::ostringstream os;
  os << "cuts [";
  for (size_t i = 0; i < cuts.size(); ++i) os << (i ? " " : "") << cuts[i];
  os << "]";
  return os.str();
}

::testing::AssertionResult CheckDeltaShape(const OutputDelta& delta, size_t* num_calls) {
  for (const auto& d : delta.tool_calls) {
    if (d.index < 0 || static_cast<size_t>(d.index) > *num_calls) {
      return ::testing::AssertionFailure()
             << "tool call delta index " << d.index << " out of order";
    }
    if (static_cast<size_t>(d.index) == *num_calls) {
      if (d.id.empty() || d.name.empty() || !d.arguments.empty()) {
        return ::testing::AssertionFailure()
               << "first delta of call " << d.index << " must carry id and name only";
      }
      ++*num_calls;
    } else if (!d.id.empty() || !d.name.empty() || d.arguments.empty()) {
      return ::testing::AssertionFailure()
             << "later delta of call " << d.index << " must carry non-empty arguments only";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult RunPieces(const OutputParserConfig& config, std::string_view text,
                                     const std::vector<size_t>& cuts, ParsedOutput* message) {
  OutputParser parser(config);
  *message = ParsedOutput();
  size_t num_calls = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    size_t end = i < cuts.size() ? cuts[i] : text.size();
    OutputDelta delta = parser.Feed(text.substr(begin, end - begin));
    if (auto shape = CheckDeltaShape(delta, &num_calls); !shape)
      return shape << " at " << DescribeCuts(cuts);
    AppendOutputDelta(delta, message);
    begin = end;
  }
  OutputDelta tail = parser.Finish();
  if (auto shape = CheckDeltaShape(tail, &num_calls); !shape) return shape << " at finish";
  AppendOutputDelta(tail, message);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckAllSplits(const OutputParserConfig& config, std::string_view text,
                                          ParsedOutput* whole) {
  *whole = ParseOutput(text, config);
  auto check = [&](const std::vector<size_t>& cuts) -> ::testing::AssertionResult {
    ParsedOutput streamed;
    if (auto r = RunPieces(config, text, cuts, &streamed); !r) return r;
    if (streamed == *whole) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << DescribeCuts(cuts) << " streamed " << Describe(streamed)
                                         << " but whole text gave " << Describe(*whole);
  };
  const size_t n = text.size();
  for (size_t a = 0; a <= n; ++a) {
    if (auto r = check({a}); !r) return r;
  }
  if (n <= kMaxPairSplitBytes) {
    for (size_t a = 1; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        if (auto r = check({a, b}); !r) return r;
      }
    }
  }
  std::vector<size_t> every_byte;
  for (size_t a = 1; a < n; ++a) every_byte.push_back(a);
  return check(every_byte);
}

ParsedOutput ParseAllSplits(const OutputParserConfig& config, std::string_view text) {
  ParsedOutput whole;
  EXPECT_TRUE(CheckAllSplits(config, text, &whole)) << "input: " << text;
  return whole;
}

OutputParserConfig ChatConfig(ModelDialect dialect, bool has_tools) {
  return {dialect, /*thinking=*/false, has_tools, ToolCallIdGenerator::Counter(), false, {}};
}

OutputParserConfig ThinkingConfig(ModelDialect dialect, bool has_tools) {
  return {dialect, /*thinking=*/true, has_tools, ToolCallIdGenerator::Counter(), false, {}};
}

std::string Describe(const ParsedOutput& message) {
  std::ostringstream os;
  os << "{reasoning=\"" << message.reasoning_content << "\", content=\"" << message.content
     << "\", calls=[";
  for (const auto& c : message.tool_calls) {
    os << "{" << c.id << ", " << c.name << ", " << c.arguments << "}";
  }
  os << "]}";
  return os.str();
}

}  // namespace peregrine::chat
