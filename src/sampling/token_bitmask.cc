#include "sampling/token_bitmask.h"

#include <limits>

namespace peregrine {

void ApplyTokenBitmask(std::span<float> logits, std::span<const uint32_t> words) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w < words.size() && w * 32 < n; ++w) {
    const uint32_t bits = words[w];
    if (bits == ~0u) continue;
    const size_t end = w * 32 + 32 < n ? w * 32 + 32 : n;
    for (size_t id = w * 32; id < end; ++id)
      if (((bits >> (id - w * 32)) & 1u) == 0) logits[id] = kMasked;
  }
}

}  // namespace peregrine
