// The V4 KV compressor, one token at a time, on fixed rings (the layout of
// kernels/compressor_step.cuh): buffers a block's projections and, when the block completes,
// pools it into one entry (per-channel softmax over the block's tokens, over 2*ratio slots
// when blocks overlap), normalises it and rotates it at the block's first position.
#pragma once

#include <cstdint>

#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4 {

// One compressor's rings for one request: kv and gate rows [coff*ratio, coff*dim], gate rows
// with `ape` added. coff = 1: row = pos % ratio; coff = 2 (overlapping blocks): row =
// ((pos / ratio) % 2) * ratio + pos % ratio, so the previous block is there when the current
// one completes.
struct CompressorRings {
  float* kv = nullptr;
  float* gate = nullptr;
  int64_t ratio = 0;
  int64_t dim = 0;   // entry width
  int64_t coff = 1;
};

// Appends the token at `position`; kv/gate are its projections [coff*dim] (gate without
// ape). When the token completes a block, writes the block's entry to `entry` [dim] and
// returns true; with `fp8_rope_dim` > 0 the entry as V4's FP8 KV format stores it (kv_fp8.h,
// that many bf16 RoPE dims; KV entries only, not index keys).
bool CompressorAppend(const CompressorWeights& w, const CompressorRings& rings, const RopeTable& rope, float eps,
                      int64_t position, const float* kv, const float* gate, float* entry, int64_t fp8_rope_dim = 0);

}  // namespace peregrine::deepseek_v4
