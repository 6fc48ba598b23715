// The sub-layers of the DeepSeek-V4 forward on the CPU backend. Each works on a chunk of
// T consecutive tokens of one sequence; shapes are stated beside every argument.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "config/model_config.h"
#include "model/deepseek_v4/kv_store.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4 {

// mHC collapse: computes the sub-layer's mixing weights from the streams and returns the
// pre-weighted sum of the streams.
//   streams [T, hc, D] -> x [T, D], post [T, hc], comb [T, hc, hc]
void HyperConnectionPre(const ModelConfig& c, const HyperConnectionWeights& w, const float* streams,
                        int64_t num_tokens, float* x, float* post, float* comb);

// mHC expand: streams[k] <- post[k] * f + sum_j comb[j][k] * streams[j].
//   streams [T, hc, D] (in place), f [T, D], post [T, hc], comb [T, hc, hc]
void HyperConnectionPost(const ModelConfig& c, float* streams, const float* f, const float* post,
                         const float* comb, int64_t num_tokens);

// Final collapse before the norm and head (sigmoid weights, no Sinkhorn).
//   streams [T, hc, D] -> y [T, D]
void HyperConnectionHead(const ModelConfig& c, const HyperConnectionWeights& w, const float* streams,
                         int64_t num_tokens, float* y);

// The mean of each row's hc streams (the block drafter's taps), rows `out_stride` apart.
//   streams [T, hc, D] -> out[t * out_stride + e], e < D
void StreamMean(const ModelConfig& c, const float* streams, int64_t num_tokens, float* out, int64_t out_stride);

struct AttentionContext {
  const ModelConfig& config;
  const RopeTable& rope;  // the layer's table (plain or compressed)
  cpu::ThreadPool& pool;
  int64_t kv_fp8_rope_dim = 0;  // > 0: KV rows and entries round-trip through kv_fp8.h's format
};

// A run of consecutive tokens of one sequence inside a batch of rows, and where its state lives.
struct Segment {
  CpuKvStore* kv = nullptr;
  int32_t slot = 0;
  std::span<const int32_t> blocks;     // block table of the compressed entries
  std::span<const int32_t> snapshots;  // per block boundary in (first, first + T]: snapshot or -1
  int64_t first_position = 0;          // position of the segment's first token
  int64_t first_row = 0;               // its row in the batch
  int64_t num_tokens = 0;
  // A draft tree instead of consecutive tokens (speculative verify), parents[i] < i and -1
  // for the root (row 0): node i sits at first_position + its depth, attends to the state
  // committed before first_position and to its own ancestors, and writes nothing of the
  // slot's state: it is staged in `kv` (CpuKvStore::Staged) for Model::CommitTree. Empty: a
  // plain run of consecutive tokens.
  std::span<const int32_t> parents;
  // Positions below it are not attended (a drafter whose state starts after position 0).
  int64_t window_floor = 0;
};

// Attention of layer `layer` over a batch of segments (tokens of several sequences):
// projections run over all rows at once, then each segment walks its tokens in order,
// extending its window ring, compressor and indexer state, attending, and writing the
// snapshots of the block boundaries it passes. With sharded weights (ShardSpec) it runs this
// rank's heads and groups and `out` is its part of the sum over the ranks.
//                                                        x [N, D] -> out [N, D]
void Attention(const AttentionContext& ctx, const AttentionWeights& w, int64_t layer, std::span<const Segment> segments,
               const float* x, int64_t num_rows, float* out);

// Routed + shared experts; with sharded weights, this rank's part of the sum over the ranks
// (the router runs whole everywhere).        x [T, D], token_ids [T] -> out [T, D]
void Moe(const ModelConfig& c, cpu::ThreadPool& pool, const MoeWeights& w, MoeType type,
         std::span<const int32_t> token_ids, const float* x, float* out);

}  // namespace peregrine::deepseek_v4
