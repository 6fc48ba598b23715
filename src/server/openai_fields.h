// Typed readers for request fields. Each leaves `out` unchanged when the key is absent or
// null, and returns a 400 naming the key when the value has the wrong type or range. Keys are
// the server's own string literals, so error messages never contain request bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/json_text.h"
#include "server/openai_request.h"

namespace peregrine::server {

// The value at `key` when present and not null.
const Json* FindField(const Json& object, const char* key);

std::optional<ApiError> ReadBool(const Json& object, const char* key, bool* out);
// Integers (a float with an integral value is accepted, as pydantic does) within [min, max].
std::optional<ApiError> ReadInt(const Json& object, const char* key, int64_t min, int64_t max,
                                std::optional<int64_t>* out);
// Finite numbers within [min, max] (or (min, max] when min_exclusive).
std::optional<ApiError> ReadFloat(const Json& object, const char* key, double min, double max,
                                  bool min_exclusive, float* out);

// An integer JSON value as int64 when it is one (floats only when integral and in range).
std::optional<int64_t> AsInt64(const Json& value);

// An array of token ids, each in [0, vocab_size).
std::optional<ApiError> ReadTokenIdArray(const Json& value, const char* key, int64_t vocab_size,
                                         std::vector<int32_t>* out);

// The fields chat and completions share (model, n, max_tokens, sampling, stop, stream, ...).
// For chat, max_completion_tokens is read when present, else max_tokens.
std::optional<ApiError> ParseGenerationOptions(const Json& body, const ParseContext& context,
                                               bool is_chat, GenerationOptions* out);

}  // namespace peregrine::server
