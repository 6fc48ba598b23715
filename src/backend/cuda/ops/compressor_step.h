// The DeepSeek-V4 KV compressor's decode step on the device (see
// kernels/compressor_step.cuh for the exact semantics and the state ring layout).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

struct CompressorStepArgs {
  Tensor kv;           // [B, coff*Dc] bf16 or f32: this token's wkv projection
  Tensor gate;         // [B, coff*Dc] same dtype: its wgate projection (without ape)
  Tensor ape;          // [ratio, coff*Dc] f32
  Tensor kv_state;     // [S, coff*ratio, coff*Dc] f32, per-request rings (S state slots)
  Tensor gate_state;   // [S, coff*ratio, coff*Dc] f32
  Tensor state_slots;  // [B] i32, each request's ring; negative = skip
  Tensor positions;    // [B] i32, the token's position; negative = skip
  Tensor norm_weight;  // [Dc] f32
  Tensor rope_cos;     // [num_positions, rope_dim / 2] f32
  Tensor rope_sin;     // [num_positions, rope_dim / 2] f32
  Tensor cache;        // [num_pages, P, Dc] bf16, the compressed entries
  Tensor page_table;   // [B, max_pages] i32, entry k lives at page_table[b, k / P], slot k % P
  int64_t ratio = 0;
  int64_t coff = 1;    // 2: overlapping blocks (CSA), 1: plain (HCA)
  int64_t rope_dim = 0;
  float eps = 1e-6f;
};

// Appends every request's token and writes the entries of the blocks it completes.
// InvalidArgument for bad tensors or an unsupported Dc (see kCompressorDims).
Status CompressorStep(const CompressorStepArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
