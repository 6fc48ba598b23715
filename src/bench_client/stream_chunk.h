// What one streamed OpenAI chunk ("data: {...}") tells a benchmark.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace peregrine::bench_client {

struct StreamChunk {
  bool is_done = false;   // the "[DONE]" sentinel that ends a stream
  bool has_text = false;  // some choice carries output: text, content, reasoning or tool calls
  std::optional<int64_t> prompt_tokens;      // from "usage", when present
  std::optional<int64_t> completion_tokens;  // from "usage", when present
  std::string error;      // the server's error message when the chunk is an error object
};

// Parses the data of one event of /v1/completions or /v1/chat/completions. Fails with
// kDataLoss when `data` is neither "[DONE]" nor a JSON object.
Result<StreamChunk> ParseStreamChunk(std::string_view data);

}  // namespace peregrine::bench_client
