// A small C interface over the attention launchers so that a Python harness can time them
// against PyTorch in the same process, on PyTorch-allocated tensors and PyTorch's stream.
// Every function returns 0 on success, or -1 with the message in pg_bench_error(handle).
// Built as libperegrine_attention_bench.so; not part of the server.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device.h"
#include "backend/cuda/ops/indexer.h"
#include "backend/cuda/ops/output_projection.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "kernels/common/kv_fp8_row.h"
#include "kernels/indexer_topk.cuh"

namespace {

using peregrine::Device;
using peregrine::DType;
using peregrine::Shape;
using peregrine::Status;
using peregrine::Tensor;

struct Bench {
  peregrine::cuda::CudaRawAllocator raw;
  std::unique_ptr<peregrine::cuda::CachingAllocator> allocator;
  peregrine::cuda::Blas blas;
  int num_sms = 0;
  std::string error;
};

Tensor View(void* data, DType dtype, Shape shape) {
  return Tensor::Contiguous(data, dtype, shape, Device::kCuda);
}

int Report(Bench* b, const Status& s) {
  if (s.ok()) return 0;
  b->error = s.ToString();
  return -1;
}

cudaStream_t AsStream(uint64_t stream) { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream)); }

}  // namespace

extern "C" {

// Binds `device`, prepares the kernels and a cuBLAS handle. Null on failure (the reason is
// printed to stderr, since there is no handle to hold it).
void* pg_bench_create(int device) {
  auto b = std::make_unique<Bench>();
  Status s = peregrine::cuda::SelectDevice(device);
  if (s.ok()) s = peregrine::cuda::PrepareSparseAttention();
  if (s.ok()) {
    b->allocator = std::make_unique<peregrine::cuda::CachingAllocator>(b->raw);
    auto blas = peregrine::cuda::Blas::Create(*b->allocator);
    if (blas.ok()) {
      b->blas = std::move(blas).value();
    } else {
      s = blas.status();
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "pg_bench_create: %s\n", s.ToString().c_str());
    return nullptr;
  }
  for (const auto& d : peregrine::cuda::ListDevices())
    if (d.index == device) b->num_sms = d.num_sms;
  return b.release();
}

void pg_bench_destroy(void* handle) {
  auto* b = static_cast<Bench*>(handle);
  if (b == nullptr) return;
  b->blas = {};
  delete b;
}

const char* pg_bench_error(void* handle) { return static_cast<Bench*>(handle)->error.c_str(); }

int pg_bench_num_sms(void* handle) { return static_cast<Bench*>(handle)->num_sms; }

// Sizes of the schedule buffer (int32 entries) and of the partial workspaces (segments).
void pg_attention_layout(int num_ctas, int max_batch, int* num_ints, int* max_segments) {
  const auto layout = peregrine::cuda::SparseAttentionLayout(num_ctas, max_batch);
  *num_ints = layout.num_ints();
  *max_segments = layout.max_segments;
}

// Fills the host array `schedule` [num_ints] for requests of rows[b] rows.
int pg_attention_plan(void* handle, const int64_t* rows, int batch, int num_ctas, int max_batch, int32_t* schedule) {
  auto* b = static_cast<Bench*>(handle);
  const auto layout = peregrine::cuda::SparseAttentionLayout(num_ctas, max_batch);
  return Report(b, peregrine::cuda::PlanSparseAttention(
                       std::span<const int64_t>(rows, static_cast<size_t>(batch)), layout,
                       std::span<int32_t>(schedule, static_cast<size_t>(layout.num_ints()))));
}

// Shapes as in backend/cuda/ops/sparse_attention.h; compressed_indices may be null (all
// entries), compressed_kv null for window-only layers, rope_cos null for no inverse RoPE.
// entry_rope_dim > 0: compressed_kv holds V4's FP8 rows (kernels/common/kv_fp8_row.h) of
// KvFp8RowLayout{dim, entry_rope_dim}.row_bytes() bytes instead of bf16 rows.
int pg_sparse_attention(void* handle, void* q, int batch, int heads, int dim, void* window_kv, int64_t window_rows,
                        void* window_indices, int window_capacity, void* window_lengths, void* compressed_kv,
                        int64_t num_pages, int page_size, void* page_table, int max_pages, void* compressed_indices,
                        int compressed_capacity, void* compressed_lengths, void* sink, void* positions,
                        void* rope_cos, void* rope_sin, int num_positions, int rope_dim, float scale, void* schedule,
                        int num_ctas, int max_batch, void* partial_o, void* partial_lse, void* out, int entry_rope_dim,
                        uint64_t stream) {
  auto* b = static_cast<Bench*>(handle);
  peregrine::cuda::SparseAttentionArgs a;
  a.layout = peregrine::cuda::SparseAttentionLayout(num_ctas, max_batch);
  a.q = View(q, DType::kBF16, {batch, heads, dim});
  a.window_kv = View(window_kv, DType::kBF16, {window_rows, dim});
  a.window_indices = View(window_indices, DType::kI32, {batch, window_capacity});
  a.window_lengths = View(window_lengths, DType::kI32, {batch});
  if (compressed_kv != nullptr) {
    if (entry_rope_dim > 0) {
      const int row_bytes = peregrine::kernels::KvFp8RowLayout{dim, entry_rope_dim}.row_bytes();
      a.compressed_kv = View(compressed_kv, DType::kU8, {num_pages, page_size, row_bytes});
      a.entry_rope_dim = entry_rope_dim;
    } else {
      a.compressed_kv = View(compressed_kv, DType::kBF16, {num_pages, page_size, dim});
    }
    a.page_table = View(page_table, DType::kI32, {batch, max_pages});
    a.compressed_lengths = View(compressed_lengths, DType::kI32, {batch});
    if (compressed_indices != nullptr)
      a.compressed_indices = View(compressed_indices, DType::kI32, {batch, compressed_capacity});
  }
  a.sink = View(sink, DType::kF32, {heads});
  a.positions = View(positions, DType::kI32, {batch});
  if (rope_cos != nullptr) {
    a.rope_cos = View(rope_cos, DType::kF32, {num_positions, rope_dim / 2});
    a.rope_sin = View(rope_sin, DType::kF32, {num_positions, rope_dim / 2});
  }
  a.rope_dim = rope_dim;
  a.scale = scale;
  a.schedule = View(schedule, DType::kI32, {a.layout.num_ints()});
  a.partial_o = View(partial_o, DType::kF32, {a.layout.max_segments, heads, dim});
  a.partial_lse = View(partial_lse, DType::kF32, {a.layout.max_segments, heads});
  a.out = View(out, DType::kBF16, {batch, heads, dim});
  return Report(b, peregrine::cuda::SparseAttentionDecode(a, AsStream(stream)));
}

int pg_indexer_scores(void* handle, void* q, int batch, int heads, int dim, void* weights, void* keys, int64_t num_pages,
                      int page_size, void* page_table, int max_pages, void* num_entries, void* scores,
                      int score_stride, float scale, int num_ctas, uint64_t stream) {
  auto* b = static_cast<Bench*>(handle);
  peregrine::cuda::IndexerScoresArgs a;
  a.q = View(q, DType::kBF16, {batch, heads, dim});
  a.weights = View(weights, DType::kF32, {batch, heads});
  a.keys = View(keys, DType::kBF16, {num_pages, page_size, dim});
  a.page_table = View(page_table, DType::kI32, {batch, max_pages});
  a.num_entries = View(num_entries, DType::kI32, {batch});
  a.scores = View(scores, DType::kF32, {batch, score_stride});
  a.scale = scale;
  a.num_ctas = num_ctas;
  return Report(b, peregrine::cuda::IndexerScores(a, AsStream(stream)));
}

// Ints per request of the top-k workspace (the caller allocates it zeroed, [batch, this]).
int pg_indexer_topk_workspace_ints() { return peregrine::kernels::kIndexerTopKWorkspaceInts; }
// Stamps per CTA of the top-k's phase record, and the CTAs of its grid for a batch.
int pg_indexer_topk_phases() { return peregrine::kernels::kIndexerTopKPhases; }
int pg_indexer_topk_grid(void* handle, int batch, int score_stride) {
  auto* b = static_cast<Bench*>(handle);
  const bool long_rows = score_stride > peregrine::kernels::kIndexerTopKShortRow;
  return batch * (long_rows ? peregrine::kernels::IndexerTopKSlices(batch, b->num_sms) : 1);
}

// phase_stamps: null, or [CTAs of the grid, kIndexerTopKPhases] u64 filled by the kernel.
int pg_indexer_topk(void* handle, void* scores, int batch, int score_stride, void* num_entries, void* indices, int k,
                    void* counts, void* workspace, void* phase_stamps, uint64_t stream) {
  auto* b = static_cast<Bench*>(handle);
  peregrine::cuda::IndexerTopKArgs a;
  a.scores = View(scores, DType::kF32, {batch, score_stride});
  a.num_entries = View(num_entries, DType::kI32, {batch});
  a.indices = View(indices, DType::kI32, {batch, k});
  a.counts = View(counts, DType::kI32, {batch});
  a.workspace = View(workspace, DType::kI32, {batch, peregrine::kernels::kIndexerTopKWorkspaceInts});
  a.num_ctas = b->num_sms;
  a.phase_stamps = static_cast<unsigned long long*>(phase_stamps);
  return Report(b, peregrine::cuda::IndexerTopK(a, AsStream(stream)));
}

int pg_output_projection(void* handle, void* o, int batch, int heads, int dim, void* wo_a, int groups, int rank,
                         void* wo_b, int hidden, void* mid, void* out, uint64_t stream) {
  auto* b = static_cast<Bench*>(handle);
  peregrine::cuda::OutputProjectionArgs a;
  a.o = View(o, DType::kBF16, {batch, heads, dim});
  a.wo_a = View(wo_a, DType::kBF16, {groups, rank, static_cast<int64_t>(heads) * dim / groups});
  a.wo_b = View(wo_b, DType::kBF16, {hidden, static_cast<int64_t>(groups) * rank});
  a.mid = View(mid, DType::kBF16, {batch, groups, rank});
  a.out = View(out, DType::kBF16, {batch, hidden});
  return Report(b, peregrine::cuda::GroupedOutputProjection(b->blas, a, AsStream(stream)));
}

}  // extern "C"
