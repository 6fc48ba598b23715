// Grammar masks on a logits row (structured outputs): bit (id % 32) of word (id / 32) set
// means token id is allowed; every other logit becomes -inf before sampling, so the sampler,
// its logprobs and its top-N see only what the grammar allows (vLLM applies the mask at the
// same point). The CUDA kernel (kernels/token_bitmask.cuh) matches this exactly.
#pragma once

#include <cstdint>
#include <span>

namespace peregrine {

// Words of a mask over a vocabulary.
inline int64_t TokenMaskWords(int64_t vocab_size) { return (vocab_size + 31) / 32; }

// `words` holds (logits.size() + 31) / 32 words.
void ApplyTokenBitmask(std::span<float> logits, std::span<const uint32_t> words);

}  // namespace peregrine
