// Checkpoint dialects -> canonical tensor names (the official release's scheme, no prefix;
// see checkpoint.h for the list).
//
// Accepted dialects:
//  - official: names already canonical (`layers.N.attn.wq_a.weight` + `.scale`, `mtp.*`);
//  - HF `save_pretrained` (transformers 5.17): a `model.` prefix, `embed_tokens.weight`,
//    `hc_head.hc_{fn,base,scale}`, `layers.N.attn.norm.weight` for kv_norm, `lm_head` or
//    `head` for the output projection;
//  - HF in-memory module names (`self_attn.q_a_proj`, `mlp.shared_experts.gate_proj`,
//    `input_layernorm`, `attn_hc.fn`, ..., fused `mlp.experts.gate_up_proj` [E, 2I, H] and
//    `mlp.experts.down_proj` [E, H, I]) as a state dict saved without the reverse mapping.
//    The fused expert tensors become one slice per expert and projection.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine {

// The canonical name of one stored (non-fused) tensor. Names of no known dialect, `mtp.*`
// included, come back unchanged after the `model.` prefix is stripped.
std::string CanonicalTensorName(std::string_view stored_name);

// One canonical tensor backed by a contiguous slice of a stored tensor.
struct CanonicalSlice {
  std::string name;
  int64_t element_offset = 0;  // into the stored tensor
  Shape shape;
};

// Every canonical tensor a stored tensor provides: one full-size slice for ordinary names,
// 2E or E slices for HF's fused expert tensors (InvalidArgument when their shape is not
// [E, 2I, H] / [E, H, I]).
Result<std::vector<CanonicalSlice>> MapStoredTensor(std::string_view stored_name,
                                                    const Shape& stored_shape);

}  // namespace peregrine
