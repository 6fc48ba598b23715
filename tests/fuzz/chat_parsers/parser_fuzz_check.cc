#include "parser_fuzz_check.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "chat/tool_call_parser_args.h"

namespace peregrine::chat {
namespace {

[[noreturn]] void Fail(const char* what, std::string_view text, const std::vector<size_t>& cuts) {
  std::fprintf(stderr, "output parser fuzz check failed: %s\ninput (%zu bytes): %.*s\ncuts:", what,
               text.size(), static_cast<int>(text.size()), text.data());
  for (size_t c : cuts) std::fprintf(stderr, " %zu", c);
  std::fprintf(stderr, "\n");
  std::abort();
}

uint64_t Hash(std::string_view text) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Split plans: byte by byte, small random pieces, large random pieces, one cut.
std::vector<std::vector<size_t>> SplitPlans(std::string_view text) {
  std::vector<std::vector<size_t>> plans;
  const size_t n = text.size();
  uint64_t state = Hash(text);
  if (n <= 4096) {
    std::vector<size_t> every;
    for (size_t i = 1; i < n; ++i) every.push_back(i);
    plans.push_back(every);
  }
  for (size_t max_piece : {size_t{8}, n / 2 + 1}) {
    std::vector<size_t> cuts;
    for (size_t at = 1 + NextRandom(&state) % max_piece; at < n;
         at += 1 + NextRandom(&state) % max_piece) {
      cuts.push_back(at);
    }
    plans.push_back(cuts);
  }
  plans.push_back({static_cast<size_t>(NextRandom(&state) % (n + 1))});
  return plans;
}

template <typename Parser, typename Delta, typename Fold>
void FeedPlan(Parser& parser, std::string_view text, const std::vector<size_t>& cuts, Fold fold) {
  size_t begin = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    size_t end = i < cuts.size() ? cuts[i] : text.size();
    fold(parser.Feed(text.substr(begin, end - begin)));
    begin = end;
  }
  fold(parser.Finish());
}

void CheckCalls(const std::vector<ToolCall>& calls, std::string_view text) {
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].name.empty()) Fail("tool call without a name", text, {});
    if (!IsJsonObject(calls[i].arguments)) Fail("arguments are not a JSON object", text, {});
    for (size_t j = 0; j < i; ++j) {
      if (calls[j].id == calls[i].id) Fail("repeated tool call id", text, {});
    }
  }
}

}  // namespace

void CheckReasoningSplits(const ReasoningParserOptions& options, std::string_view text) {
  ReasoningDelta whole = SplitReasoning(text, options);
  // Nothing is lost: the input is the parts plus at most a leading <think> and one </think>.
  std::string rebuilt = whole.reasoning_content + whole.content;
  std::string rebuilt_think = whole.reasoning_content + "</think>" + whole.content;
  std::string_view body = text;
  if (options.starts_in_reasoning && body.starts_with("<think>")) body.remove_prefix(7);
  if (body != rebuilt && body != rebuilt_think) Fail("reasoning split loses text", text, {});
  for (const auto& cuts : SplitPlans(text)) {
    ReasoningParser parser(options);
    ReasoningDelta streamed;
    FeedPlan<ReasoningParser, ReasoningDelta>(parser, text, cuts, [&](const ReasoningDelta& d) {
      streamed.reasoning_content += d.reasoning_content;
      streamed.content += d.content;
    });
    if (!(streamed == whole)) Fail("streamed reasoning differs from whole text", text, cuts);
  }
}

void CheckToolCallSplits(ToolCallDialect dialect, std::string_view text) {
  auto options = [dialect] {
    return ToolCallParserOptions{dialect, ToolCallIdGenerator::Counter(), false, {}};
  };
  ParsedToolCalls whole = ParseToolCalls(text, options());
  if (whole.tool_calls.empty() && whole.content != text) Fail("text lost without a call", text, {});
  CheckCalls(whole.tool_calls, text);
  for (const auto& cuts : SplitPlans(text)) {
    ToolCallParser parser(options());
    ParsedToolCalls streamed;
    FeedPlan<ToolCallParser, ToolCallParserDelta>(
        parser, text, cuts, [&](const ToolCallParserDelta& d) {
          streamed.content += d.content;
          AppendToolCallDeltas(d.tool_calls, &streamed.tool_calls);
        });
    if (!(streamed == whole)) Fail("streamed tool calls differ from whole text", text, cuts);
  }
}

void CheckOutputSplits(const OutputParserConfig& config, std::string_view text) {
  ParsedOutput whole = ParseOutput(text, config);
  CheckCalls(whole.tool_calls, text);
  if (!config.thinking && whole.tool_calls.empty() && whole.content != text) {
    Fail("content lost without a call", text, {});
  }
  for (const auto& cuts : SplitPlans(text)) {
    OutputParser parser(config);
    ParsedOutput streamed;
    FeedPlan<OutputParser, OutputDelta>(
        parser, text, cuts, [&](const OutputDelta& d) { AppendOutputDelta(d, &streamed); });
    if (!(streamed == whole)) Fail("streamed output differs from whole text", text, cuts);
  }
}

}  // namespace peregrine::chat
