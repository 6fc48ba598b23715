// CudaModel's private state, shared by its translation units (setup and plan, layers).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/stream.h"
#include "kernels/sparse_attention.cuh"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/step_plan.h"

namespace peregrine::deepseek_v4::cuda {

namespace pc = ::peregrine::cuda;

// One layer's views of the runtime's KV pools (kv_geometry.h has the pool layout).
struct LayerKv {
  Tensor window;            // [num_slots*W + max_tokens, Dh] bf16: rings, then the step's rows
  Tensor kv_ring;           // [num_slots, coff*ratio, coff*Dh] f32 compressor ring
  Tensor gate_ring;         // same
  Tensor cache;             // [num_blocks, P, Dh] bf16 compressed entries (P = block / ratio)
  Tensor index_kv_ring;     // [num_slots, 2*4, 2*Id] f32 (CSA)
  Tensor index_gate_ring;   // same
  Tensor index_keys;        // [num_blocks, P, Id] bf16 (CSA)
  // CSA: this layer's snapshot tails in record 0 (records are snapshot_floats apart):
  // kv, gate [ratio, 2*Dh] and the indexer's kv, gate [ratio, 2*Id], f32.
  float* tail_kv = nullptr;
  float* tail_gate = nullptr;
  float* tail_index_kv = nullptr;
  float* tail_index_gate = nullptr;
};

// A layer's staging rows for speculative verify (docs/decisions/0010-device-draft-trees.md),
// by staging row (a verify node of the last step): the ring rows a node would append ([rows,
// coff*Dh] f32; the indexer's [rows, 2*Id]) and the entry and index key it completes
// ([rows, Dh] / [rows, Id] bf16). Empty for window-only layers or without verify.
struct LayerStage {
  DeviceTensor kv, gate, index_kv, index_gate, entries, index_keys;
};

// A draft tree of the last planned step (what EnqueueCommit keeps one root path of).
struct VerifiedTree {
  int32_t slot = 0;
  int64_t first_position = 0;   // the root's position
  int64_t first_row = 0;        // the root's token row in the step
  int64_t first_stage_row = 0;  // the root's staging row (node i: + i)
  std::vector<int32_t> parents;
  std::vector<int32_t> blocks;  // the slot's block table (where the kept entries go)
};

// Per-step activations, sized for max_tokens rows; a step uses the first N rows.
struct Workspace {
  DeviceTensor streams;   // [N, hc, D] f32
  DeviceTensor x;         // [N, D] bf16 (normed sub-layer input)
  DeviceTensor post;      // [N, hc] f32
  DeviceTensor comb;      // [N, hc, hc] f32
  DeviceTensor hc_workspace;  // mHC scratch (HyperConnectionWorkspaceFloats)
  DeviceTensor f;         // [N, D] bf16 sub-layer output
  DeviceTensor qr;        // [N, q_lora] f32
  DeviceTensor qr_n;      // [N, q_lora] bf16
  DeviceTensor q;         // [N, H*Dh] f32
  DeviceTensor q_n;       // [N, H, Dh] bf16
  DeviceTensor kv;        // [N, Dh] f32
  DeviceTensor ckv;       // [2, N, 2*Dh] f32 compressor projections: wkv's, then wgate's
  DeviceTensor ikv;       // [2, N, 2*Id] f32 the indexer compressor's, the same way
  DeviceTensor iq;        // [N, IH*Id] bf16
  DeviceTensor iw;        // [N, IH] f32
  DeviceTensor scores;    // [index_batch, S] f32
  DeviceTensor topk;      // [N, topk] i32
  DeviceTensor topk_counts;  // [N] i32
  DeviceTensor topk_workspace;  // [index_batch, kIndexerTopKWorkspaceInts] i32, zeroed (long rows only)
  DeviceTensor o;         // [N, H, Dh] bf16
  DeviceTensor mid;       // [N, G, R] bf16
  DeviceTensor partial_o;    // [segments, H, Dh] f32 (fast attention)
  DeviceTensor partial_lse;  // [segments, H] f32
  // MoE
  DeviceTensor router_logits;  // [N, E] f32
  DeviceTensor topk_ids;       // [N, K] i32
  DeviceTensor topk_weights;   // [N, K] f32
  DeviceTensor expert_offsets;      // [E + 1] i32
  DeviceTensor sorted_assignments;  // [N*K] i32
  DeviceTensor expert_h;       // [N*K, I] bf16
  DeviceTensor expert_y;       // [N*K, D] f32
  DeviceTensor shared_gate_up;  // [N, 2*I_shared] bf16
  DeviceTensor shared_h;       // [N, I_shared] bf16
  DeviceTensor shared_y;       // [N, D] bf16
  // Head
  DeviceTensor head_x;         // [N, D] bf16
  DeviceTensor logits;         // [N, vocab] f32
  // Sharded head: this rank's logits [N, head_rows] and every rank's [size, N, head_rows] f32.
  DeviceTensor head_logits, gathered_logits;
};

// Offsets (in int32s) of the step metadata inside the runtime's metadata buffer.
struct MetaLayout {
  int64_t token_ids = 0, positions = 0, token_slots = 0, window_indices = 0, window_lengths = 0;
  int64_t ring_src = 0, ring_dst = 0, csa_entries = 0, hca_entries = 0;
  int64_t chunk_offsets = 0, chunk_positions = 0, chunk_slots = 0, logit_rows = 0;
  int64_t snapshot_table = 0, max_snapshots = 1;  // [chunks, max_snapshots]
  int64_t compress_slots = 0;  // [chunks] the sequential compressor's slots (-1: a verify chunk)
  // Draft trees (StepPlan's; -1 when the step verifies none).
  int64_t tree_rows = -1, tree_paths = -1, path_capacity = 0;
  int64_t csa_staged_first = -1, csa_staged = -1, csa_staged_capacity = 0;
  int64_t hca_staged_first = -1, hca_staged = -1, hca_staged_capacity = 0;
  std::array<int64_t, 3> schedules{};  // sliding, CSA, HCA
};

// Op kinds of the profile, in print order.
enum class OpKind : uint8_t {
  kEmbedding, kMhc, kNorm, kProjection, kRope, kCompressor, kIndexer, kTopK, kAttention, kOutputProjection,
  kWindowUpdate, kRouter, kMoeExperts, kSharedExpert, kHead, kCollective, kCount
};
const char* OpKindName(OpKind kind);

struct CudaModel::Impl {
  ModelConfig config;
  DeviceModelLimits limits;
  KvGeometry geometry;
  pc::CachingAllocator* allocator = nullptr;
  pc::Blas blas;
  DeviceWeights weights;
  DeviceParallel parallel;  // this rank's part and its group (size 1: whole)
  Workspace ws;
  DeviceTensor main_cos, main_sin, compress_cos, compress_sin;  // [max_context, rope/2] f32
  int64_t max_entries_csa = 0, max_entries_hca = 0, score_stride = 0, index_batch = 0;

  // The runtime's pools (BindKv).
  DeviceKvPools pools;
  std::vector<LayerKv> kv;
  int64_t window_layer_rows = 0;   // rows of one layer's window buffer
  int64_t snapshot_floats = 0;     // one snapshot record, in floats
  bool bound = false;

  // Speculative verify (limits.max_verify_rows > 0): the staging rows per layer, the last
  // planned step's trees (committed by EnqueueCommit), and the commit's copy list.
  std::vector<LayerStage> stages;
  std::vector<VerifiedTree> trees;
  DeviceTensor commit_segments;  // [capacity, sizeof(KvCopySegment)] u8
  DeviceTensor commit_checksum;  // [1] u64 (the copy kernel's checksum, unused)
  // Enqueues the copies that keep each commit's path (cuda_verify.cc).
  Status EnqueueCommit(std::span<const TreeCommit> commits, cudaStream_t stream);

  // The MTP drafter (cuda_drafter.cc; limits.max_draft_steps > 0 and mtp.0.* in the
  // checkpoint): its weights, its window rows (the runtime's "mtp_window" pool, laid out as a
  // layer's window), per slot the target position of its local position 0 (the drafter runs
  // at positions relative to where it started: window attention depends on offsets only).
  std::optional<DeviceMtp> mtp;
  // Or the block drafter (cuda_block_drafter.cc; the config's dspark keys and
  // mtp.0.main_proj.weight in the checkpoint): its weights and the target layers' lane means
  // of the last step's rows (written by the target step itself).
  std::optional<DeviceBlockDrafter> block;
  // The drafter's layers' windows (the MTP layer's, or each block-drafter stage's), in the
  // runtime's "mtp_window" pool laid out as that many layers' windows.
  std::vector<LayerKv> drafter_kv;
  std::vector<int64_t> mtp_floor;
  bool drafts() const { return mtp.has_value() || block.has_value(); }
  int64_t drafter_layers() const {
    return block.has_value() ? static_cast<int64_t>(block->stages.size()) : mtp.has_value() ? 1 : 0;
  }
  // Row copies of a drafter call: metadata offsets of the source and destination row lists.
  struct RowCopies {
    int64_t src = 0, dst = 0, n = 0;
  };
  struct DraftPlan {
    std::vector<MetaLayout> steps;  // per drafter step: its metadata
    std::vector<int64_t> rows;      // its token rows
    std::vector<int64_t> chunks;    // its chunks
    // Streams into mtp_h: of the last step's rows, of the slots' pending rows; the new pending
    // rows out of the last step; per chain step, each drafting slot's previous row.
    RowCopies gather_step, gather_pending, keep_pending;
    std::vector<RowCopies> chain;   // [steps], chain[0] unused
    RowCopies ring;                 // the drafter's ring rows the chain overwrites -> mtp_ring_save
    int64_t drafting_rows = 0;  // padded to a power of two: the chain steps' rows
    int32_t num_steps = 0;
  };
  DraftPlan draft;
  // Lists src and dst (padded with -1 to n) placed in `meta`; the copies dst[d] = src[s] they
  // describe, on `stream` (reverse: src[s] = dst[d]).
  static Result<RowCopies> PlaceRows(StepMeta& meta, std::span<const int32_t> src, std::span<const int32_t> dst,
                                     int64_t n);
  Status CopyRowsOf(const RowCopies& c, const Tensor& src, const Tensor& dst, bool reverse = false);
  // A draft call's inputs as both drafters plan them: the first step's views over every
  // input's pairs (at positions relative to where each slot's drafter started; a restart moves
  // that), the row lists into the pairs' buffer (from the last step's rows, from the slots'
  // pending rows; the new pending rows), and per drafting input its slot, the index of its
  // last pair, its last next token and the position after that pair.
  struct DraftPairs {
    std::vector<ChunkView> views;
    std::vector<int32_t> gather_src, gather_dst, pending_src, pending_dst, keep_src, keep_dst;
    std::vector<int32_t> drafting_slots, last_rows, last_next;
    std::vector<int64_t> next_local;
    int64_t rows = 0;           // the pairs, padded to a power of two (at most max_tokens)
    int64_t drafting_rows = 0;  // the drafting inputs, padded to a power of two (at most the slots)
  };
  // InvalidArgument, with nothing changed, for a bad input (a drafting one takes `drafted`
  // positions past its last pair); else each restarting slot's new start is recorded.
  Result<DraftPairs> GatherDraftPairs(std::span<const DevicePairs> inputs, int64_t drafted);
  int64_t last_step_rows = 0;      // rows of the last planned target step (what pairs may read)
  DeviceTensor mtp_h;              // [max_tokens, hc, D] f32: the pairs' streams
  DeviceTensor mtp_e;              // [max_tokens, D] f32: the pairs' token embeddings
  DeviceTensor mtp_hn;             // [max_tokens * hc, D] bf16: hnorm(streams)
  DeviceTensor mtp_post, mtp_comb; // [max_tokens, hc] ones, [max_tokens, hc, hc] identity
  DeviceTensor mtp_pending;        // [num_slots, hc, D] f32
  DeviceTensor mtp_ring_save;      // [num_slots * (max_draft_steps - 1), Dh] bf16
  DeviceTensor draft_out;          // [num_slots, max_draft_steps] i32
  DeviceTensor draft_cand_tokens, draft_cand_logprobs;  // [num_slots, max_draft_steps, K] (K > 1)
  DeviceTensor sample_tokens;      // the drafter's greedy token per drafting slot
  Status AllocateDrafter();        // after BindKv (per-slot buffers)
  Status EnqueueDraftStep(int64_t step);
  // Depth k's greedy token of each of the b drafting rows (into sample_tokens and column k of
  // draft_out) and, with draft_candidates > 1, its candidates, from `logits` [b, vocab] plus
  // `bias` when given.
  Status EnqueueDepthCandidates(const Tensor& logits, const Tensor& bias, int64_t b, int64_t k);

  // The block drafter's buffers and its last planned call (cuda_block_drafter.cc).
  DeviceTensor taps;             // [max_tokens, taps * D] bf16: the last target step's lane means
  DeviceTensor block_in;         // [max_tokens, taps * D] bf16: the pairs' taps
  DeviceTensor block_pending;    // [num_slots, taps * D] bf16
  DeviceTensor block_x;          // [max_tokens, D] f32: main_x
  DeviceTensor block_r;          // [num_slots, rank] bf16: markov_w1 rows of the tokens before
  DeviceTensor block_markov;     // [num_slots, vocab] f32: their Markov terms
  DeviceTensor block_ring_save;  // [stages, num_slots * block, Dh] bf16
  struct BlockPlan {
    MetaLayout committed, block;     // the two steps' metadata
    int64_t rows = 0, chunks = 0;    // the committed rows' step (padded)
    int64_t block_rows = 0, block_chunks = 0;
    int64_t drafting_rows = 0;       // drafting slots, padded to a power of two
    int64_t depth = 0;               // block positions drafted per slot
    // Taps into block_in (the last step's rows, the slots' pending rows), the new pending
    // rows out of the last step, main_x onto every stream, the ring rows the block overwrites.
    RowCopies gather_step, gather_pending, keep_pending, spread, ring;
    int64_t logit_rows = 0;          // [depth, drafting_rows] block rows, depth-major
    int64_t before = 0, iota = 0;    // [drafting_rows] the token before depth 0; 0 .. rows - 1
  };
  BlockPlan block_plan;
  Status AllocateBlockDrafter();
  Result<DeviceModel::DraftShape> PlanBlockDraft(std::span<const DevicePairs> inputs, int32_t num_steps,
                                                 StepMeta& meta);
  Status EnqueueBlockDraft(const StepMeta& meta, cudaStream_t stream);
  int64_t block_list_ints() const;  // the row lists' metadata ints (besides the two steps')

  // Layer i's weights, KV views, verify staging rows and kinds; i >= config.num_layers is the
  // drafter's layer i - num_layers (the MTP layer, or a block-drafter stage).
  struct LayerRefs {
    const DeviceLayer* weights;
    const LayerKv* kv;
    const LayerStage* stage;
    AttentionType attention;
    MoeType moe;
  };
  LayerRefs LayerAt(int64_t i) const;
  // The step's metadata from its host plan (Plan's, and each drafter step's).
  Result<DeviceStep> WritePlan(const StepPlan& plan, int64_t rows, StepMeta& meta);

  // Fast-kernel availability at this config.
  bool fast_attention = false;
  bool fast_indexer = false;
  kernels::SparseAttentionScheduleLayout attention_layout;

  // The step being planned or enqueued.
  MetaLayout layout;
  const StepMeta* meta = nullptr;
  cudaStream_t stream = nullptr;
  OpProfiler* profiler = nullptr;

  // Decode-sized steps captured into graphs (at most kBranchMaxRows rows) run a layer's
  // independent parts on `branch_stream` beside `stream`: the KV row, the compressors and the
  // indexer beside the query projections; the shared expert beside the router and the routed
  // experts. Events fork the branch from `stream` and join it back, so inside a capture the
  // two become parallel branches of the graph. At these sizes the projections are custom
  // kernels (FP8 ones never touch the FP8 workspace below 65 rows); one that falls back to
  // cuBLAS on the branch (odd shapes) uses the branch's own handle.
  static constexpr int64_t kBranchMaxRows = 4;
  pc::Stream branch_stream;
  pc::Blas branch_blas;
  pc::Event fork_event, ready_event, join_event;
  pc::Blas& BlasOn(cudaStream_t s) { return s == branch_stream.get() ? branch_blas : blas; }
  // The stream a branch forked from `stream` now runs on: branch_stream, or `stream` itself
  // when the step does not fork.
  Result<cudaStream_t> Fork(int64_t rows);
  // Work enqueued on `to` from now on waits for what `from` holds so far (nothing to do when
  // they are one stream).
  Status Order(cudaStream_t from, cudaStream_t to, pc::Event& event);
  // Joins a forked branch back into `stream` when it leaves scope, error paths included (a
  // capture must not end with the branch unjoined); Join() joins earlier and says how it went.
  class BranchScope {
   public:
    BranchScope(Impl& m, cudaStream_t branch) : m_(m), branch_(branch) {}
    BranchScope(const BranchScope&) = delete;
    BranchScope& operator=(const BranchScope&) = delete;
    ~BranchScope() {
      if (!joined_) (void)m_.Order(branch_, m_.stream, m_.join_event);
    }
    Status Join() {
      joined_ = true;
      return m_.Order(branch_, m_.stream, m_.join_event);
    }

   private:
    Impl& m_;
    cudaStream_t branch_;
    bool joined_ = false;
  };

  // Setup (cuda_model.cc).
  Status Allocate(cudaStream_t load_stream);
  // A device buffer of `shape` (at least 16 bytes) from the allocator, viewed contiguously.
  Status AllocateTensor(DType dtype, Shape shape, DeviceTensor* out);
  // Views of the metadata buffer for the current step.
  Tensor MetaView(int64_t offset, Shape shape) const;
  Tensor BlockTables() const;  // [num_slots, max_blocks] i32
  // The whole step on the stream for `rows` tokens (the plan's, or a graph bucket's).
  Status EnqueueStep(int64_t rows, int64_t chunks, int64_t logit_rows);
  Status EnqueueLayer(int64_t layer, int64_t rows, int64_t chunks);
  Status EnqueueAttention(int64_t layer, int64_t rows, int64_t chunks);
  // leave_combine: stop before the experts' combine (the caller's mHC expansion forms it).
  Status EnqueueMoe(int64_t layer, int64_t rows, bool leave_combine);
  // Sharded: `count` bf16 partial sums at `data` summed over the ranks, in place.
  Status SumOverRanks(void* data, int64_t count);
  // The head: this rank's vocabulary part, gathered into ws.logits when sharded (the MTP
  // drafter's head mixer and norm when `drafter`).
  Status EnqueueHead(int64_t rows, int64_t logit_rows, bool drafter = false);
  // Runs `op` as one profiled op of `kind` (just runs it when not profiling).
  template <typename F>
  Status Op(OpKind kind, F&& op);
};

template <typename F>
Status CudaModel::Impl::Op(OpKind kind, F&& op) {
  if (profiler == nullptr) return op();
  return profiler->Run(static_cast<int>(kind), [&]() -> Status { return op(); });
}

inline int64_t PowerOfTwoAtLeast(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

// A contiguous device view of `buffer`'s first elements.
inline Tensor View(const DeviceTensor& t, DType dtype, Shape shape) {
  return Tensor::Contiguous(t.view.data, dtype, shape, Device::kCuda);
}
inline Tensor ViewAt(const DeviceTensor& t, int64_t byte_offset, DType dtype, Shape shape) {
  return Tensor::Contiguous(static_cast<char*>(t.view.data) + byte_offset, dtype, shape, Device::kCuda);
}

}  // namespace peregrine::deepseek_v4::cuda
