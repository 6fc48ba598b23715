// RoPE keys of config.json -> the two tables of ModelConfig (internal to src/config).
//
// Mirrors HF transformers' DeepseekV4Config: a nested `rope_parameters` {main, compress} is
// taken as written (a missing `rope_theta` inside falls back to the top-level `rope_theta`);
// otherwise the flat `rope_scaling` / `rope_parameters` dict describes the compress table only,
// whose theta is always `compress_rope_theta`, and the main table is plain RoPE at
// `rope_theta`. YaRN's `attention_factor` is 1.0 unless given (the V4 reference never scales
// cos/sin).
#pragma once

#include "base/status.h"
#include "config/json_fields.h"
#include "config/model_config.h"

namespace peregrine {

// Needs cfg->head_dim, rope_head_dim and max_position_embeddings already set.
Status ParseRopeParameters(const JsonFields& root, ModelConfig* cfg);

}  // namespace peregrine
