// Grammar masks on logits rows before sampling (structured outputs; the host reference is
// src/sampling/token_bitmask.h): bit (id % 32) of word (id / 32) of a row's mask set means
// token id is allowed, every other logit becomes -inf. Rows without a mask are untouched.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct TokenBitmaskParams {
  float* logits = nullptr;            // [rows, vocab], edited in place
  const uint32_t* masks = nullptr;    // [num_masks, words]
  const int32_t* row_mask = nullptr;  // [rows]: the row's mask, or < 0 for none
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t words = 0;                  // >= (vocab + 31) / 32
  int64_t num_masks = 0;
};

cudaError_t LaunchApplyTokenBitmask(const TokenBitmaskParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
