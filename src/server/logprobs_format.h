// OpenAI logprobs objects from sampler results: the chat shape ({"content":[{token, logprob,
// bytes, top_logprobs}]}) and the legacy completions shape ({tokens, token_logprobs,
// top_logprobs, text_offset}). Token strings are the token decoded alone (U+FFFD where it is
// a fragment of a character); `bytes` are the token's raw bytes. -inf becomes -9999.0 (JSON
// has no infinities), as vLLM does.
#pragma once

#include <cstdint>
#include <span>

#include "sampling/sampler.h"
#include "server/json_text.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server {

// Entries for `samples`, each with `num_top` alternatives (the content array of chat logprobs).
Json ChatLogprobsContent(const tokenizer::Tokenizer& tokenizer,
                         std::span<const SampleResult> samples, int num_top);

// Completions logprobs: appends to the four arrays of `logprobs` (created when null);
// `text_offset` is the running offset in code points of the choice's text.
void AppendCompletionLogprobs(const tokenizer::Tokenizer& tokenizer,
                              std::span<const SampleResult> samples, int num_top,
                              int64_t* text_offset, Json* logprobs);

}  // namespace peregrine::server
