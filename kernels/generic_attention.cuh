// Shape-generic versions of the attention path's kernels, for the (heads, head dim) pairs the
// fast kernels are not built for (small test models, prefill rows of any count). Simple and
// capture-safe: the grid depends only on host-known sizes, every length is read on the device.
//
// Sparse attention: the semantics of kernels/sparse_attention.cuh exactly (row order, masking,
// sink, inverse RoPE), without the schedule, the partials or the combine launch. One CTA per
// (request, head): its warps take every kGenericAttentionWarps-th row of the request's list,
// each keeping an online softmax in fp32, and merge with the sink at the end.
//
// Indexer scores: the semantics of kernels/indexer_scores.cuh for any (heads, dim). A fixed
// grid of about num_ctas CTAs, key_ctas x rows_ctas with rows_ctas = min(B, num_ctas) and
// key_ctas = num_ctas / rows_ctas: CTA (x, y) takes the requests y, y + rows_ctas, ... and,
// within each, every key_ctas-th group of keys; a warp scores one key at a time against every
// head held in shared memory. Work follows the real num_entries, not the configured maximum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/host_device.h"
#include "kernels/indexer_scores.cuh"
#include "kernels/sparse_attention.cuh"

namespace peregrine::kernels {

inline constexpr int kGenericAttentionWarps = 4;
// Largest head dim of the generic attention (its row slice lives in registers).
inline constexpr int kGenericAttentionMaxDim = 1024;

// Per-lane layout of one row: `vector` consecutive bf16 values per load (8: 16-byte loads
// when D % 8 == 0, else 2), `iterations` loads per lane, so the kernel covers
// D <= 32 * vector * iterations.
struct GenericAttentionTile {
  int vector;
  int iterations;
};
// Built tiles, smallest first for each vector width; the launcher takes the first that fits.
inline constexpr GenericAttentionTile kGenericAttentionTiles[] = {{8, 1}, {8, 2}, {8, 4},  {2, 1},
                                                                  {2, 2}, {2, 4}, {2, 8}, {2, 16}};

// Uses SparseAttentionParams' fields except schedule, partial_o, partial_lse and layout.
// Needs heads >= 1, head_dim even and at most kGenericAttentionMaxDim; grid = (batch, heads).
cudaError_t LaunchSparseAttentionGeneric(const SparseAttentionParams& p, cudaStream_t stream);

inline constexpr int kGenericIndexerWarps = 4;

// Dynamic shared memory of the generic indexer for (heads, dim): the queries in fp32 (rows
// padded to dim + 1 floats), the weights and one key row per warp.
PG_HOST_DEVICE constexpr int64_t GenericIndexerSharedBytes(int64_t heads, int64_t dim) {
  return 4 * (heads * (dim + 1) + heads + kGenericIndexerWarps * dim);
}
// The most the generic indexer asks for (the default limit, no attribute needed).
inline constexpr int64_t kGenericIndexerMaxSharedBytes = 48 * 1024;

// Uses IndexerScoresParams as the fast kernel does (num_ctas in [1, 65535], dim even, any
// batch): scores[b, k] = sum_h weights[b, h] * scale * ReLU(q[b, h] . key_k) for
// k < min(num_entries[b], max_pages * page_size, score_stride); later entries are untouched.
// A key whose page is negative or past the cache scores 0, as in the fast kernel.
cudaError_t LaunchIndexerScoresGeneric(const IndexerScoresParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
