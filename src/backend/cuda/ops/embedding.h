// Token embedding straight into the mHC streams (the model's first step): each token's bf16
// table row, as f32, in every one of its hc streams.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct EmbeddingArgs {
  Tensor token_ids;  // [N] i32; an id outside [0, V) writes zero rows (validate on the host)
  Tensor table;      // [V, D] bf16, D a multiple of 8
  Tensor streams;    // [N, hc, D] f32 out
};

// InvalidArgument (naming the tensor) for bad shapes, dtypes, devices or alignment; Internal
// when the launch fails. Asynchronous on `stream`, capture-safe.
Status EmbeddingLookup(const EmbeddingArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
