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

// Completions echo with logprobs: the prompt's tokens ahead of the generated ones, the first
// (`first_token`) with null token_logprobs and top_logprobs, then one per prompt score.
void AppendEchoLogprobs(const tokenizer::Tokenizer& tokenizer, int32_t first_token,
                        std::span<const SampleResult> prompt_scores, int num_top,
                        int64_t* text_offset, Json* logprobs);

// vLLM's prompt_logprobs: null for the first prompt token, then per scored token an object
// keyed by token id, {"<id>": {"logprob", "rank", "decoded_token"}}, for the token itself and
// its num_top most likely alternatives.
Json PromptLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                        std::span<const SampleResult> prompt_scores, int num_top);

}  // namespace peregrine::server
