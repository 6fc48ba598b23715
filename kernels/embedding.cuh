// Token embedding into the mHC streams: each token's bf16 table row, as fp32, copied into
// every one of its hc streams. Ids outside [0, V) write zeros (never read out of bounds).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct EmbeddingParams {
  const int32_t* token_ids;  // [N]
  const void* table;         // [V, D] bf16
  float* streams;            // [N, hc, D]
  int64_t num_tokens = 0;
  int64_t vocab_size = 0;
  int hc = 0;
  int dim = 0;  // a multiple of 8
};

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
