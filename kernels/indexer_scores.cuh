// Lightning-indexer scores for decode: for request b and each of its visible compressed
// entries k < num_entries[b],
//   scores[b, k] = sum_h weights[b, h] * scale * ReLU(q[b, h] . key[k])
// with keys read from a paged cache (row = page_table[b, k / page_size] * page_size +
// k % page_size), or from a staging row for an entry the staged table covers. Work follows
// the real lengths: the launch has a fixed number of CTAs that split the batch's actual key
// chunks evenly between them, whatever the configured maximum context. Entries at or past num_entries[b] are not written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/staged_entries.h"

namespace peregrine::kernels {

struct IndexerScoresParams {
  const __nv_bfloat16* q;      // [B, heads, dim]
  const float* weights;        // [B, heads]
  const __nv_bfloat16* keys;   // [num_key_rows, dim]  (pages * page_size rows)
  const int32_t* page_table;   // [num_page_tables, max_pages]
  const int32_t* page_table_rows = nullptr;  // [B] row of page_table per request; null: row b
  const int32_t* num_entries;  // [B]
  StagedEntries staged;        // keys read from staging rows instead (draft trees)
  float* scores;               // [B, score_stride]
  int batch = 0;
  int heads = 0;
  int dim = 0;
  int page_size = 0;
  int max_pages = 0;
  int num_page_tables = 0;  // rows of page_table
  int64_t num_key_rows = 0;
  int score_stride = 0;
  float scale = 1.0f;
  int num_ctas = 0;  // grid size: a multiple of the SM count; work is split among them
};

struct IndexerScoresConfig {
  int heads;
  int dim;
};
// The (heads, dim) pairs the kernel is built for: DeepSeek-V4's 64 x 128, and a small one.
inline constexpr IndexerScoresConfig kIndexerScoresConfigs[] = {{64, 128}, {8, 64}};
// Batch limit of one launch (each CTA prefix-sums the batch's lengths in shared memory).
inline constexpr int kIndexerMaxBatch = 1024;
// Keys scored per step of a CTA.
inline constexpr int kIndexerChunk = 64;

cudaError_t LaunchIndexerScores(const IndexerScoresParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
