// Launchers of kernels/step_feed.cuh: the device-side inputs of an overlapped engine step.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct FeedTokensArgs {
  Tensor token_ids;  // [N] i32, edited in place
  Tensor feeds;      // [n, 2] i32: (row of token_ids, index into sampled); n may be 0
  Tensor sampled;    // [S] i32: the previous step's sampled tokens (< 0: none, fed as 0)
};

// token_ids[feeds[i, 0]] = max(sampled[feeds[i, 1]], 0) when sampled >= 0, else 0.
Status FeedTokens(const FeedTokensArgs& args, cudaStream_t stream);

struct CopyFlaggedRowsArgs {
  Tensor src;    // [R, W] f32
  Tensor dst;    // [R, W] f32
  Tensor flags;  // [R] i32: rows with a nonzero flag are copied, the others left as they are
};

Status CopyFlaggedRows(const CopyFlaggedRowsArgs& args, cudaStream_t stream);

struct CountLogitsAboveArgs {
  Tensor logits;  // [R, W] f32
  Tensor rows;    // [n] i32: the row of each item
  Tensor tokens;  // [n] i32: the item's token
  Tensor counts;  // [n] i32 out: logits of the row strictly above the token's (NaN as -inf); -1 out of range
};

// A token's rank among its row's logits is counts + 1 (prompt logprobs).
Status CountLogitsAbove(const CountLogitsAboveArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
