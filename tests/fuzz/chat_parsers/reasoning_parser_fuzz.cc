// Fuzzes ReasoningParser: the first byte picks the options, the rest is model output.
#include <cstddef>
#include <cstdint>

#include "parser_fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine::chat;
  if (size == 0) return 0;
  ReasoningParserOptions options;
  options.starts_in_reasoning = (data[0] & 1) == 0;
  switch ((data[0] >> 1) % 3) {
    case 0:
      options.tool_block_opener = "<｜DSML｜tool_calls>";
      options.tool_invoke_opener = "<｜DSML｜invoke";
      break;
    case 1:
      options.tool_block_opener = "<｜DSML｜function_calls>";
      options.tool_invoke_opener = "<｜DSML｜invoke";
      break;
    default:
      break;
  }
  CheckReasoningSplits(options, {reinterpret_cast<const char*>(data) + 1, size - 1});
  return 0;
}
