// ToolCallIdGenerator: the ids given to parsed tool calls ("call_..."). Deterministic for a given
// construction, so a streaming parser and a whole-text parser built alike agree on every id.
#pragma once

#include <cstdint>
#include <string>

namespace peregrine::chat {

class ToolCallIdGenerator {
 public:
  // "call_" + 24 characters from [0-9A-Za-z], drawn from a splitmix64 stream seeded by `seed`.
  // Serving seeds it per request from a random source, so ids differ across requests.
  static ToolCallIdGenerator Random(uint64_t seed);
  // "call_0", "call_1", ... (tests, reproducible logs).
  static ToolCallIdGenerator Counter();

  std::string Next();

 private:
  enum class Kind { kRandom, kCounter };
  ToolCallIdGenerator(Kind kind, uint64_t state) : kind_(kind), state_(state) {}

  Kind kind_;
  uint64_t state_;
};

}  // namespace peregrine::chat
