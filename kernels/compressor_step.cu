#include "kernels/compressor_step.cuh"

#include <cuda_bf16.h>

#include <array>

#include "kernels/common/warp.cuh"

namespace peregrine::kernels {

namespace {

__host__ __device__ constexpr int ThreadsFor(int dim) { return dim < 256 ? dim : 256; }

// One CTA per request. Thread t owns channels t, t + kThreads, ... of the entry.
template <int kDim>
__global__ void __launch_bounds__(ThreadsFor(kDim)) CompressorStepKernel(const CompressorStepParams p) {
  constexpr int kThreads = ThreadsFor(kDim);
  constexpr int kPer = kDim / kThreads;
  static_assert(kDim % kThreads == 0 && kThreads % kWarpSize == 0);
  __shared__ float entry[kDim];
  __shared__ float scratch[kThreads / kWarpSize];

  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int pos = p.positions[b];
  const int slot = p.state_slots[b];
  if (pos < 0 || slot < 0 || slot >= p.num_state_slots) return;

  const int ratio = p.ratio;
  const int coff = p.coff;
  const int width = coff * kDim;
  const int rows_per_slot = coff * ratio;
  const int in_block = pos % ratio;
  const int block = pos / ratio;
  const int half = coff == 2 ? (block & 1) : 0;
  const int64_t slot_base = static_cast<int64_t>(slot) * rows_per_slot * width;
  float* kv_state = p.kv_state + slot_base;
  float* gate_state = p.gate_state + slot_base;

  // Append this token's row (gate with its in-block position bias).
  {
    float* kv_row = kv_state + static_cast<int64_t>(half * ratio + in_block) * width;
    float* gate_row = gate_state + static_cast<int64_t>(half * ratio + in_block) * width;
    const float* ape = p.ape + static_cast<int64_t>(in_block) * width;
    const int64_t in_offset = static_cast<int64_t>(b) * width;
    if (p.input_type == ElementType::kBF16) {
      const __nv_bfloat16* kv = static_cast<const __nv_bfloat16*>(p.kv) + in_offset;
      const __nv_bfloat16* gate = static_cast<const __nv_bfloat16*>(p.gate) + in_offset;
      for (int c = tid; c < width; c += kThreads) {
        kv_row[c] = __bfloat162float(kv[c]);
        gate_row[c] = __bfloat162float(gate[c]) + ape[c];
      }
    } else {
      const float* kv = static_cast<const float*>(p.kv) + in_offset;
      const float* gate = static_cast<const float*>(p.gate) + in_offset;
      for (int c = tid; c < width; c += kThreads) {
        kv_row[c] = kv[c];
        gate_row[c] = gate[c] + ape[c];
      }
    }
  }
  if ((pos + 1) % ratio != 0) return;  // uniform over the CTA
  __syncthreads();

  // Pool: per channel, softmax over the slots' gates weighting their kv values. The current
  // block's slots come first, then the previous block's, as in the reference.
  const bool overlap = coff == 2;
  const bool has_previous = overlap && block >= 1;
  const int current_column = overlap ? kDim : 0;
  const float* cur_kv = kv_state + static_cast<int64_t>(half * ratio) * width + current_column;
  const float* cur_gate = gate_state + static_cast<int64_t>(half * ratio) * width + current_column;
  const float* prev_kv = kv_state + static_cast<int64_t>((half ^ 1) * ratio) * width;
  const float* prev_gate = gate_state + static_cast<int64_t>((half ^ 1) * ratio) * width;
  float value[kPer];
  float sum_squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = tid + j * kThreads;
    float max_gate = -INFINITY;
    for (int t = 0; t < ratio; ++t) max_gate = fmaxf(max_gate, cur_gate[static_cast<int64_t>(t) * width + c]);
    if (has_previous)
      for (int t = 0; t < ratio; ++t) max_gate = fmaxf(max_gate, prev_gate[static_cast<int64_t>(t) * width + c]);
    float denom = 0.0f;
    float acc = 0.0f;
    for (int t = 0; t < ratio; ++t) {
      const float e = expf(cur_gate[static_cast<int64_t>(t) * width + c] - max_gate);
      denom += e;
      acc += e * cur_kv[static_cast<int64_t>(t) * width + c];
    }
    if (has_previous) {
      for (int t = 0; t < ratio; ++t) {
        const float e = expf(prev_gate[static_cast<int64_t>(t) * width + c] - max_gate);
        denom += e;
        acc += e * prev_kv[static_cast<int64_t>(t) * width + c];
      }
    }
    value[j] = acc / denom;
    sum_squares += value[j] * value[j];
  }
  sum_squares = BlockSum<kThreads>(sum_squares, scratch);
  const float scale = rsqrtf(sum_squares / static_cast<float>(kDim) + p.eps);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = tid + j * kThreads;
    entry[c] = value[j] * scale * p.norm_weight[c];
  }
  __syncthreads();

  // Rotate at the block's first position and store.
  const int k = (pos + 1) / ratio - 1;
  const int rope_position = pos + 1 - ratio;
  const int page = k / p.page_size;
  if (page >= p.max_pages || rope_position >= p.num_positions) return;
  const int physical_page = p.page_table[static_cast<int64_t>(b) * p.max_pages + page];
  const int64_t row = static_cast<int64_t>(physical_page) * p.page_size + k % p.page_size;
  if (physical_page < 0 || row >= p.num_cache_rows) return;
  __nv_bfloat16* out = p.cache + row * kDim;
  const int rope_begin = kDim - p.rope_dim;
  const int rope_half = p.rope_dim / 2;
  for (int c = tid; c < kDim; c += kThreads) {
    float v = entry[c];
    if (c >= rope_begin) {
      const int i = (c - rope_begin) / 2;
      const float cs = p.rope_cos[static_cast<int64_t>(rope_position) * rope_half + i];
      const float sn = p.rope_sin[static_cast<int64_t>(rope_position) * rope_half + i];
      const float x0 = entry[c & ~1];
      const float x1 = entry[c | 1];
      v = (c & 1) == 0 ? x0 * cs - x1 * sn : x1 * cs + x0 * sn;
    }
    out[c] = __float2bfloat16_rn(v);
  }
}

template <int kDim>
cudaError_t LaunchDim(const CompressorStepParams& p, cudaStream_t stream) {
  CompressorStepKernel<kDim><<<static_cast<unsigned>(p.batch), ThreadsFor(kDim), 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCompressorStep(const CompressorStepParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  static_assert(std::size(kCompressorDims) == 3);
  if (p.dim == kCompressorDims[0]) return LaunchDim<kCompressorDims[0]>(p, stream);
  if (p.dim == kCompressorDims[1]) return LaunchDim<kCompressorDims[1]>(p, stream);
  if (p.dim == kCompressorDims[2]) return LaunchDim<kCompressorDims[2]>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace peregrine::kernels
