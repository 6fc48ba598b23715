// Device-side inputs of an overlapped engine step (src/runtime/cuda_model_runner.cc):
// - FeedTokens writes tokens that the previous step sampled, still on the device, into this
//   step's token ids, so the host can launch step n+1 before it has read step n's tokens.
// - CopyFlaggedRows saves the rows of a buffer whose flag is set (the sampled rows the device
//   gave up on), so the host can finish them after the next step has overwritten the buffer.
// - CountLogitsAbove ranks known tokens in their logits rows (prompt logprobs' rank).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct FeedTokensParams {
  int32_t* token_ids = nullptr;        // [num_rows] this step's token ids, edited in place
  const int32_t* feeds = nullptr;      // [n, 2] (row of token_ids, index into sampled)
  const int32_t* sampled = nullptr;    // [num_sampled] the previous step's tokens; < 0: none
  int64_t n = 0;
  int64_t num_rows = 0;
  int64_t num_sampled = 0;
};

// token_ids[row] = sampled[index], or 0 where sampled[index] < 0 (the host finishes that
// row and restarts whichever sequence was fed from it). Pairs out of range are skipped.
cudaError_t LaunchFeedTokens(const FeedTokensParams& p, cudaStream_t stream);

struct CopyFlaggedRowsParams {
  const float* src = nullptr;     // [rows, width]
  float* dst = nullptr;           // [rows, width]
  const int32_t* flags = nullptr; // [rows]; rows with flag != 0 are copied
  int64_t rows = 0;
  int64_t width = 0;
};

cudaError_t LaunchCopyFlaggedRows(const CopyFlaggedRowsParams& p, cudaStream_t stream);

struct CountLogitsAboveParams {
  const float* logits = nullptr;   // [num_rows, width]
  const int32_t* rows = nullptr;   // [n] row of each item
  const int32_t* tokens = nullptr; // [n] the item's token, in [0, width)
  int32_t* counts = nullptr;       // [n] out
  int64_t n = 0;
  int64_t num_rows = 0;
  int64_t width = 0;
};

// counts[i] = the number of logits in row rows[i] strictly above that row's logit of
// tokens[i], a NaN logit counting as -inf (never above, and below every other value when it
// is the token's). Items out of range get -1. One CTA per item.
cudaError_t LaunchCountLogitsAbove(const CountLogitsAboveParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
