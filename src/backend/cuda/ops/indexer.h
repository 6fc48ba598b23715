// The lightning indexer's decode path on the device: scores over each request's visible
// compressed keys, then top-k with -1 padding and the count (kernels/indexer_scores.cuh,
// kernels/indexer_topk.cuh). One launch each, no host synchronisation, capture-safe.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct IndexerScoresArgs {
  Tensor q;            // [B, IH, Id] bf16 (rotated)
  Tensor weights;      // [B, IH] f32 (weights_proj output, times IH^-1/2)
  Tensor keys;         // [num_pages, P, Id] bf16 indexer key cache
  Tensor page_table;   // [T, max_pages] i32
  Tensor page_table_rows;  // [B] i32: request b's row of page_table; absent = row b (T = B)
  Tensor num_entries;  // [B] i32 visible entries, floor((pos + 1) / 4)
  // Draft trees (kernels/common/staged_entries.h): keys e >= staged_first[b] are rows
  // staged_table[b, e - staged_first[b]] of staged_keys. All three absent: none.
  Tensor staged_keys;   // [R, Id] bf16
  Tensor staged_first;  // [B] i32
  Tensor staged_table;  // [B, Ks] i32
  Tensor scores;       // [B, S] f32 workspace; S >= the largest num_entries, S % 4 == 0
  float scale = 1.0f;  // Id^-1/2
  int num_ctas = 0;    // scoring grid, a few CTAs per SM; independent of S and max_pages
};

// scores[b, k] = sum_h weights[b, h] * scale * ReLU(q[b, h] . key_k) for k < num_entries[b].
Status IndexerScores(const IndexerScoresArgs& args, cudaStream_t stream);

struct IndexerTopKArgs {
  Tensor scores;       // [B, S] f32
  Tensor num_entries;  // [B] i32
  Tensor indices;      // [B, K] i32: the top K entries in ascending order, then -1
  Tensor counts;       // [B] i32: min(K, num_entries)
  // [B, kernels::kIndexerTopKWorkspaceInts] i32 (64 KB per request), zeroed once by its owner
  // before the first call; every call leaves it reusable. Required when S >
  // kernels::kIndexerTopKShortRow, may be absent (null) otherwise.
  Tensor workspace;
  int num_ctas = 0;  // long-row grid: about one CTA per SM; independent of S and the lengths
  // Benchmarks only: [grid CTAs, kernels::kIndexerTopKPhases] stamps (kernels/indexer_topk.cuh).
  unsigned long long* phase_stamps = nullptr;
};

// Top K per request (score descending, ties to the lower entry), K = indices' second dim,
// at most kernels::kIndexerTopKMax. Rows longer than kIndexerTopKShortRow are split over
// num_ctas / B CTAs per request (the grid depends only on B and num_ctas).
Status IndexerTopK(const IndexerTopKArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
