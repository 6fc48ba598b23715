// Fuzzes the DeepSeek-V3.2 DSML tool-call parser on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "parser_fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  peregrine::chat::CheckToolCallSplits(peregrine::chat::ToolCallDialect::kDsmlV32,
                                       {reinterpret_cast<const char*>(data), size});
  return 0;
}
