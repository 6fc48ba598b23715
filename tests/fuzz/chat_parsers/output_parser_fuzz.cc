// Fuzzes the OutputParser facade: the first byte picks dialect, thinking mode and tools.
#include <cstddef>
#include <cstdint>

#include "parser_fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine::chat;
  if (size == 0) return 0;
  constexpr ModelDialect kDialects[] = {ModelDialect::kDeepSeekV4, ModelDialect::kDeepSeekV32,
                                        ModelDialect::kDeepSeekV31, ModelDialect::kDeepSeekV3};
  OutputParserConfig config{kDialects[data[0] & 3],
                            (data[0] & 4) != 0,
                            (data[0] & 8) == 0,
                            ToolCallIdGenerator::Counter(),
                            false,
                            {}};
  CheckOutputSplits(config, {reinterpret_cast<const char*>(data) + 1, size - 1});
  return 0;
}
