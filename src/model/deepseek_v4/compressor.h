// The V4 KV compressor, one token at a time: buffers a block's projections and, when the
// block completes, pools it into one entry (per-channel softmax over the block's tokens,
// over 2*ratio slots when blocks overlap), normalises it and rotates it at the block's
// first position.
#pragma once

#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4 {

// Appends the token at `position`; kv/gate are its projections [coff*dim] (gate without
// ape). Returns true when the token completed a block and a new entry was appended.
bool CompressorAppend(const CompressorWeights& w, CompressorState& state, const RopeTable& rope,
                      float eps, int64_t position, const float* kv, const float* gate);

}  // namespace peregrine::deepseek_v4
