// RoPE frequency tables for DeepSeek-V4: plain (theta only) or YaRN-blended, computed in
// fp32 exactly as HF transformers does, so angles match the reference bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"

namespace peregrine::deepseek_v4 {

class RopeTable {
 public:
  RopeTable(const RopeConfig& config, int64_t rope_dim);

  int64_t rope_dim() const { return rope_dim_; }
  // cos/sin of the rope_dim/2 pair angles at `position`.      cos, sin [rope_dim / 2]
  void Angles(int64_t position, float* cos, float* sin) const;

 private:
  int64_t rope_dim_;
  float attention_factor_;
  std::vector<float> inv_freq_;  // [rope_dim / 2]
};

}  // namespace peregrine::deepseek_v4
