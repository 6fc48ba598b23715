// CPU references for the batched DeepSeek-V4 decode attention ops, with the same batched
// interface as the CUDA ops (one call for B requests, caches addressed through page tables
// and index lists, per-request metadata arrays) in fp32 storage. They compute exactly what
// the per-token model code does (model/deepseek_v4/attention.cc, compressor.cc) and are the
// oracle the CUDA kernels are tested against. Nothing here allocates except where noted.
#pragma once

#include <cstdint>

#include "backend/cpu/thread_pool.h"

namespace peregrine::cpu {

// Interleaved RoPE on the trailing `rope_dim` values of each row at per-row positions:
// row r uses table row positions[r / rows_per_position]. Rows whose position is outside
// [0, num_positions) are left unchanged.
//   x [rows, n] (in place), positions [rows / rows_per_position], cos/sin [num_positions, rope_dim / 2]
void RopeAtPositions(float* x, int64_t rows, int64_t n, int64_t rope_dim, const int32_t* positions,
                     int64_t rows_per_position, const float* cos, const float* sin, int64_t num_positions,
                     bool inverse);

// One decode step of the KV compressor for B requests (state ring layout and semantics as in
// kernels/compressor_step.cuh). Requests with a negative position or slot are skipped.
struct CompressorStepInputs {
  const float* kv;             // [B, coff*dim]
  const float* gate;           // [B, coff*dim] (without ape)
  const float* ape;            // [ratio, coff*dim]
  float* kv_state;             // [num_state_slots, coff*ratio, coff*dim]
  float* gate_state;           // [num_state_slots, coff*ratio, coff*dim]
  const int32_t* state_slots;  // [B]
  const int32_t* positions;    // [B]
  const float* norm_weight;    // [dim]
  const float* rope_cos;       // [num_positions, rope_dim / 2]
  const float* rope_sin;       // [num_positions, rope_dim / 2]
  float* cache;                // [num_cache_rows, dim] (pages * page_size rows)
  const int32_t* page_table;   // [B, max_pages]
  int64_t batch = 0;
  int64_t dim = 0;
  int64_t ratio = 0;
  int64_t coff = 1;
  int64_t rope_dim = 0;
  int64_t num_positions = 0;
  int64_t num_state_slots = 0;
  int64_t page_size = 1;
  int64_t max_pages = 0;
  int64_t num_cache_rows = 0;
  float eps = 1e-6f;
};
void CompressorStep(const CompressorStepInputs& in);

// Lightning-indexer scores: scores[b, k] = sum_h weights[b, h] * (ReLU(q[b, h] . key_k) * scale)
// for k < num_entries[b] (accumulated over h in order, as the model does); other entries of
// the row are left untouched.
struct IndexerScoresInputs {
  const float* q;              // [B, heads, dim]
  const float* weights;        // [B, heads]
  const float* keys;           // [num_key_rows, dim] (pages * page_size rows)
  const int32_t* page_table;   // [B, max_pages]
  const int32_t* num_entries;  // [B]
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t dim = 0;
  int64_t page_size = 1;
  int64_t max_pages = 0;
  float scale = 1.0f;
};
void IndexerScores(ThreadPool& pool, const IndexerScoresInputs& in, float* scores, int64_t score_stride);

// Top-k of each request's first num_entries[b] scores, score descending with ties to the
// lower index; written as ascending entry numbers, then -1. counts[b] = min(k, num_entries[b]).
//   scores [B, score_stride], num_entries [B] -> indices [B, k], counts [B]
void IndexerTopK(const float* scores, const int32_t* num_entries, int64_t batch, int64_t score_stride, int64_t k,
                 int32_t* indices, int32_t* counts);

// Sparse sink attention over the window and compressed caches, then the inverse RoPE of the
// output at positions[b] (skipped when rope_cos is null). Row order and masking as in
// kernels/sparse_attention.cuh.
struct SparseAttentionInputs {
  const float* q;                      // [B, heads, dim]
  const float* window_kv;              // [num_window_rows, dim]
  const int32_t* window_indices;       // [B, window_capacity]
  const int32_t* window_lengths;       // [B]
  const float* compressed_kv;          // [num_compressed_rows, dim], or null
  const int32_t* page_table;           // [B, max_pages]
  const int32_t* compressed_indices;   // [B, compressed_capacity], or null for entries 0..len-1
  const int32_t* compressed_lengths;   // [B]
  const float* sink;                   // [heads]
  const int32_t* positions;            // [B]
  const float* rope_cos;               // [num_positions, rope_dim / 2], or null
  const float* rope_sin;               // [num_positions, rope_dim / 2]
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t dim = 0;
  int64_t num_window_rows = 0;
  int64_t window_capacity = 0;
  int64_t num_compressed_rows = 0;
  int64_t page_size = 1;
  int64_t max_pages = 0;
  int64_t compressed_capacity = 0;
  int64_t rope_dim = 0;
  int64_t num_positions = 0;
  float scale = 1.0f;
};
void SparseAttentionDecode(ThreadPool& pool, const SparseAttentionInputs& in, float* out /* [B, heads, dim] */);

// Grouped low-rank output projection: each group of heads/groups consecutive heads projects
// through wo_a[g] to `rank` values, then wo_b mixes all groups.
//   o [B, heads*dim], wo_a [groups, rank, heads*dim/groups], wo_b [hidden, groups*rank]
//   -> out [B, hidden]; allocates its intermediates.
void GroupedOutputProjection(ThreadPool& pool, const float* o, const float* wo_a, const float* wo_b, int64_t batch,
                             int64_t heads, int64_t dim, int64_t groups, int64_t rank, int64_t hidden, float* out);

}  // namespace peregrine::cpu
