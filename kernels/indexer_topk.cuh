// Top-k selection over each request's valid prefix of indexer scores (decode).
//
// For request b with n = num_entries[b] valid scores, selects K = min(k, n) entries: the
// largest scores, ties to the lower index (exactly the order "score descending, then index
// ascending"). indices[b, :K] holds the selected entry numbers in ascending order,
// indices[b, K:] is -1, and counts[b] = K. One CTA per request, no host synchronisation.
//
// Method: a radix select on the unique 64-bit key (order-preserving score bits, inverted
// index bits), 11/11/10-bit digits from the top, each pass a shared-memory histogram over the
// elements still tied with the threshold; once those fit in shared memory they are gathered
// there and the remaining passes run on them. Typical inputs need two or three reads of the
// scores; equal scores only add passes over the index bits. Rows of up to 6,144 entries
// (contexts up to 24K tokens) are read once into shared memory and selected there, the picks
// written in entry order by a block scan instead of a sort.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

struct IndexerTopKParams {
  const float* scores;         // [B, score_stride]  (16-byte aligned rows)
  const int32_t* num_entries;  // [B]
  int32_t* indices;            // [B, k]
  int32_t* counts;             // [B]
  int batch = 0;
  int score_stride = 0;  // a multiple of 4
  int k = 0;
};

// Largest k the kernel is built for.
inline constexpr int kIndexerTopKMax = 2048;

cudaError_t LaunchIndexerTopK(const IndexerTopKParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
