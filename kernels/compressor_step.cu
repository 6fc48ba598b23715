#include "kernels/compressor_step.cuh"

#include <cuda_bf16.h>

#include "kernels/common/page_table.cuh"
#include "kernels/common/warp.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

// Appends one token's kv and gate rows (the gate with its in-block bias) at `ring_row`.
template <int kThreads, typename T>
__device__ __forceinline__ void AppendRow(const T* kv, const T* gate, const float* ape, float* kv_row, float* gate_row,
                                          int width) {
  for (int c = static_cast<int>(threadIdx.x); c < width; c += kThreads) {
    kv_row[c] = ToFloat(kv[c]);
    gate_row[c] = ToFloat(gate[c]) + ape[c];
  }
}

// One CTA per request, looping over its tokens. Thread t owns channels t, t + kThreads, ...
// of the entry; the pooled entry is staged in shared memory (dim floats) for the RoPE pairs.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) CompressorStepKernel(const CompressorStepParams p) {
  StartAfterPredecessor();
  static_assert(kThreads % kWarpSize == 0);
  extern __shared__ float entry[];
  __shared__ float scratch[kThreads / kWarpSize];

  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int first_position = p.positions[b];
  const int slot = p.state_slots[b];
  if (first_position < 0 || slot < 0 || slot >= p.num_state_slots) return;
  int begin = b;
  int end = b + 1;
  if (p.token_offsets != nullptr) {
    begin = p.token_offsets[b];
    end = p.token_offsets[b + 1];
    begin = begin < 0 ? 0 : (begin > p.num_tokens ? p.num_tokens : begin);
    end = end < begin ? begin : (end > p.num_tokens ? p.num_tokens : end);
  }

  const int dim = p.dim;
  const int ratio = p.ratio;
  const int coff = p.coff;
  const int width = coff * dim;
  const int rows_per_slot = coff * ratio;
  const bool overlap = coff == 2;
  const int64_t slot_base = static_cast<int64_t>(slot) * rows_per_slot * width;
  float* kv_state = p.kv_state + slot_base;
  float* gate_state = p.gate_state + slot_base;

  for (int t = begin; t < end; ++t) {
    const int pos = first_position + (t - begin);
    const int in_block = pos % ratio;
    const int block = pos / ratio;
    const int half = overlap ? (block & 1) : 0;

    // Append this token's row.
    {
      float* kv_row = kv_state + static_cast<int64_t>(half * ratio + in_block) * width;
      float* gate_row = gate_state + static_cast<int64_t>(half * ratio + in_block) * width;
      const float* ape = p.ape + static_cast<int64_t>(in_block) * width;
      const int64_t in_offset = static_cast<int64_t>(t) * width;
      const int save = p.save_rows != nullptr ? p.save_rows[t] : -1;
      if (save >= 0 && save < p.num_save_rows) {
        // Each thread saves the channels it then overwrites.
        float* kv_saved = p.save_kv + static_cast<int64_t>(save) * width;
        float* gate_saved = p.save_gate + static_cast<int64_t>(save) * width;
        for (int c = tid; c < width; c += kThreads) {
          kv_saved[c] = kv_row[c];
          gate_saved[c] = gate_row[c];
        }
      }
      if (p.input_type == ElementType::kBF16) {
        AppendRow<kThreads>(static_cast<const __nv_bfloat16*>(p.kv) + in_offset,
                            static_cast<const __nv_bfloat16*>(p.gate) + in_offset, ape, kv_row, gate_row, width);
      } else {
        AppendRow<kThreads>(static_cast<const float*>(p.kv) + in_offset, static_cast<const float*>(p.gate) + in_offset,
                            ape, kv_row, gate_row, width);
      }
    }
    if ((pos + 1) % ratio != 0) continue;  // uniform over the CTA
    __syncthreads();

    // Pool: per channel, softmax over the slots' gates weighting their kv values. The current
    // block's slots come first, then the previous block's, as in the reference.
    const bool has_previous = overlap && block >= 1;
    const int current_column = overlap ? dim : 0;
    const float* cur_kv = kv_state + static_cast<int64_t>(half * ratio) * width + current_column;
    const float* cur_gate = gate_state + static_cast<int64_t>(half * ratio) * width + current_column;
    const float* prev_kv = kv_state + static_cast<int64_t>((half ^ 1) * ratio) * width;
    const float* prev_gate = gate_state + static_cast<int64_t>((half ^ 1) * ratio) * width;
    float sum_squares = 0.0f;
    for (int c = tid; c < dim; c += kThreads) {
      float max_gate = -INFINITY;
      for (int r = 0; r < ratio; ++r) max_gate = fmaxf(max_gate, cur_gate[static_cast<int64_t>(r) * width + c]);
      if (has_previous)
        for (int r = 0; r < ratio; ++r) max_gate = fmaxf(max_gate, prev_gate[static_cast<int64_t>(r) * width + c]);
      float denom = 0.0f;
      float acc = 0.0f;
      for (int r = 0; r < ratio; ++r) {
        const float e = expf(cur_gate[static_cast<int64_t>(r) * width + c] - max_gate);
        denom += e;
        acc += e * cur_kv[static_cast<int64_t>(r) * width + c];
      }
      if (has_previous) {
        for (int r = 0; r < ratio; ++r) {
          const float e = expf(prev_gate[static_cast<int64_t>(r) * width + c] - max_gate);
          denom += e;
          acc += e * prev_kv[static_cast<int64_t>(r) * width + c];
        }
      }
      const float value = acc / denom;
      entry[c] = value;
      sum_squares += value * value;
    }
    sum_squares = BlockSum<kThreads>(sum_squares, scratch);
    const float scale = rsqrtf(sum_squares / static_cast<float>(dim) + p.eps);
    for (int c = tid; c < dim; c += kThreads) entry[c] = entry[c] * scale * p.norm_weight[c];
    __syncthreads();

    // Rotate at the block's first position and store.
    const int k = (pos + 1) / ratio - 1;
    const int rope_position = pos + 1 - ratio;
    const int page = k / p.page_size;
    if (page < p.max_pages && rope_position < p.num_positions) {
      const int32_t* table = PageTableRow(p.page_table, p.page_table_rows, p.num_page_tables, p.max_pages, b);
      const int physical_page = table != nullptr ? table[page] : -1;
      const int64_t row = static_cast<int64_t>(physical_page) * p.page_size + k % p.page_size;
      if (physical_page >= 0 && row < p.num_cache_rows) {
        __nv_bfloat16* out = p.cache + row * dim;
        const int rope_begin = dim - p.rope_dim;
        const int rope_half = p.rope_dim / 2;
        for (int c = tid; c < dim; c += kThreads) {
          float v = entry[c];
          if (c >= rope_begin) {
            const int i = (c - rope_begin) / 2;
            const float cs = p.rope_cos[static_cast<int64_t>(rope_position) * rope_half + i];
            const float sn = p.rope_sin[static_cast<int64_t>(rope_position) * rope_half + i];
            const float x0 = entry[rope_begin + 2 * i];
            const float x1 = entry[rope_begin + 2 * i + 1];
            v = ((c - rope_begin) & 1) == 0 ? x0 * cs - x1 * sn : x1 * cs + x0 * sn;
          }
          out[c] = __float2bfloat16_rn(v);
        }
      }
    }
    // A snapshot boundary: the block's ring rows, for a request that starts here.
    if (p.snapshot_table != nullptr && p.snapshot_interval > 0 && (pos + 1) % p.snapshot_interval == 0) {
      const int i = (pos + 1) / p.snapshot_interval - first_position / p.snapshot_interval - 1;
      const int record = i >= 0 && i < p.max_snapshots ? p.snapshot_table[static_cast<int64_t>(b) * p.max_snapshots + i] : -1;
      if (record >= 0 && record < p.num_snapshots) {
        const int64_t n = static_cast<int64_t>(ratio) * width;
        const float* kv_rows = kv_state + static_cast<int64_t>(half * ratio) * width;
        const float* gate_rows = gate_state + static_cast<int64_t>(half * ratio) * width;
        float* kv_out = p.snapshot_kv + record * p.snapshot_stride;
        float* gate_out = p.snapshot_gate + record * p.snapshot_stride;
        for (int64_t j = tid; j < n; j += kThreads) {
          kv_out[j] = kv_rows[j];
          gate_out[j] = gate_rows[j];
        }
      }
    }
    // The next token may overwrite ring rows just pooled (the previous block's half) and
    // the next block's entry overwrites `entry`.
    __syncthreads();
  }
}

template <int kThreads>
cudaError_t LaunchThreads(const CompressorStepParams& p, cudaStream_t stream) {
  const size_t shared_bytes = static_cast<size_t>(p.dim) * sizeof(float);
  return LaunchDependent(CompressorStepKernel<kThreads>, LaunchShape{dim3(static_cast<unsigned>(p.batch)), dim3(kThreads), shared_bytes}, stream, p);
}

}  // namespace

cudaError_t LaunchCompressorStep(const CompressorStepParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.dim <= 0 || p.dim > kCompressorMaxDim || p.ratio <= 0 || (p.coff != 1 && p.coff != 2) || p.page_size <= 0 ||
      p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dim)
    return cudaErrorInvalidValue;
  // One thread per channel up to 256 (the widths of one warp, two, four and eight).
  if (p.dim <= 32) return LaunchThreads<32>(p, stream);
  if (p.dim <= 64) return LaunchThreads<64>(p, stream);
  if (p.dim <= 128) return LaunchThreads<128>(p, stream);
  return LaunchThreads<256>(p, stream);
}

}  // namespace peregrine::kernels
