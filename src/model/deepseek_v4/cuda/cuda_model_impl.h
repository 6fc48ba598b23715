// CudaModel's private state, shared by its translation units (setup, layers, step, graphs).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/stream.h"
#include "kernels/sparse_attention.cuh"
#include "model/deepseek_v4/cuda/cuda_model.h"

namespace peregrine::deepseek_v4::cuda {

namespace pc = ::peregrine::cuda;

// Device state of one layer, for every slot.
struct LayerState {
  DeviceTensor window;         // [num_slots*W + max_tokens, Dh] bf16: rings, then the step's rows
  DeviceTensor kv_state;       // [num_slots, coff*ratio, coff*Dh] f32 compressor ring
  DeviceTensor gate_state;     // same
  DeviceTensor cache;          // [num_slots, max_entries, Dh] bf16 compressed entries
  DeviceTensor index_kv_state;    // [num_slots, 2*4, 2*Id] f32 (CSA)
  DeviceTensor index_gate_state;  // same
  DeviceTensor index_keys;        // [num_slots, max_entries, Id] bf16 (CSA)
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
  DeviceTensor ckv, cgate;  // [N, 2*Dh] f32 compressor projections
  DeviceTensor ikv, igate;  // [N, 2*Id] f32 indexer compressor projections
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
};

// Offsets (in int32s) of the step metadata inside the one device buffer it is copied to.
struct MetaLayout {
  int64_t token_ids = 0, positions = 0, token_slots = 0, window_indices = 0, window_lengths = 0;
  int64_t ring_src = 0, ring_dst = 0, csa_entries = 0, hca_entries = 0;
  int64_t chunk_offsets = 0, chunk_positions = 0, chunk_slots = 0, logit_rows = 0;
  int64_t feeds = 0, num_feeds = 0;  // [num_feeds, 2] (row, index into the fed tokens)
  std::array<int64_t, 3> schedules{};  // sliding, CSA, HCA
  int64_t total = 0;
};

// Op kinds of the profile, in print order.
enum class OpKind : uint8_t {
  kEmbedding, kMhc, kNorm, kProjection, kRope, kCompressor, kIndexer, kTopK, kAttention, kOutputProjection,
  kWindowUpdate, kRouter, kMoeExperts, kSharedExpert, kHead, kCount
};
const char* OpKindName(OpKind kind);

struct CudaModel::Impl {
  ModelConfig config;
  CudaModelOptions options;
  int num_sms = 0;
  pc::CudaRawAllocator raw;
  std::unique_ptr<pc::CachingAllocator> allocator;
  pc::Stream stream;
  pc::Blas blas;
  DeviceWeights weights;
  std::vector<LayerState> state;
  uint64_t state_bytes = 0;
  Workspace ws;
  DeviceTensor main_cos, main_sin, compress_cos, compress_sin;  // [max_context, rope/2] f32
  int64_t max_entries_csa = 0, max_entries_hca = 0, score_stride = 0, index_batch = 0, max_logit_rows = 0;

  // Fast-kernel availability at this config.
  bool fast_attention = false;
  bool fast_indexer = false;
  kernels::SparseAttentionScheduleLayout attention_layout;

  // Step metadata: pinned staging and its device copy. Two staging buffers alternate, so a
  // step can be planned while the previous one's copy may still be queued; each is reused
  // only after the event recorded behind its copy has passed.
  std::array<int32_t*, 2> meta_host{};
  std::array<cudaEvent_t, 2> meta_copied{};
  int meta_turn = 0;
  DeviceTensor meta;
  int64_t meta_capacity = 0;
  MetaLayout layout;

  // Profiling: when set, every op is bracketed by events.
  struct ProfileEvent {
    OpKind kind;
    cudaEvent_t begin, end;
  };
  bool profiling = false;
  std::vector<cudaEvent_t> event_pool;
  size_t events_used = 0;
  std::vector<ProfileEvent> profile_events;

  double last_host_ms = 0.0;

  // Decode graphs by bucket (batch size).
  std::map<int64_t, pc::Graph> graphs;
  int64_t graph_max_batch = 0;

  ~Impl();

  // Setup (cuda_model.cc).
  Status Allocate();
  // Views of the metadata buffer for the current step.
  Tensor MetaView(int64_t offset, Shape shape) const;
  // Fills a pinned staging buffer from `plan` (padded to `rows` tokens / chunks) and enqueues
  // its copy, then the feed of the chunks' fed tokens from `fed_tokens` (device).
  Status UploadPlan(const StepPlan& plan, int64_t rows, std::span<const StepChunk> chunks = {},
                    const int32_t* fed_tokens = nullptr, int64_t num_fed_tokens = 0);
  // Checks, plans, uploads and enqueues a step (graph replay for decode buckets); `*logit_rows`
  // gets the number of logits rows it computes.
  Status Enqueue(std::span<const StepChunk> chunks, const int32_t* fed_tokens, int64_t num_fed_tokens,
                 int64_t* logit_rows);
  // The whole step on the stream for `rows` tokens (the plan's, or a graph bucket's).
  Status EnqueueStep(int64_t rows, int64_t chunks, int64_t logit_rows);
  Status EnqueueLayer(int64_t layer, int64_t rows, int64_t chunks);
  Status EnqueueAttention(int64_t layer, int64_t rows, int64_t chunks);
  Status EnqueueMoe(int64_t layer, int64_t rows);
  // Runs `op` as one profiled op of `kind` (just runs it when not profiling).
  template <typename F>
  Status Op(OpKind kind, F&& op);
};

template <typename F>
Status CudaModel::Impl::Op(OpKind kind, F&& op) {
  if (!profiling) return op();
  if (events_used + 2 > event_pool.size()) {
    for (int i = 0; i < 256; ++i) {
      cudaEvent_t e;
      if (cudaEventCreate(&e) != cudaSuccess) return Internal("cudaEventCreate failed while profiling");
      event_pool.push_back(e);
    }
  }
  ProfileEvent pe{kind, event_pool[events_used], event_pool[events_used + 1]};
  events_used += 2;
  cudaEventRecord(pe.begin, stream.get());
  Status s = op();
  cudaEventRecord(pe.end, stream.get());
  profile_events.push_back(pe);
  return s;
}

// A contiguous device view of `buffer`'s first elements.
inline Tensor View(const DeviceTensor& t, DType dtype, Shape shape) {
  return Tensor::Contiguous(t.view.data, dtype, shape, Device::kCuda);
}
inline Tensor ViewAt(const DeviceTensor& t, int64_t byte_offset, DType dtype, Shape shape) {
  return Tensor::Contiguous(static_cast<char*>(t.view.data) + byte_offset, dtype, shape, Device::kCuda);
}

}  // namespace peregrine::deepseek_v4::cuda
