// Single-pass maximum and argmax over a logits row, written so the compiler vectorizes them.
#pragma once

#include <cstdint>
#include <span>

namespace peregrine {

// The largest logit; NaN is skipped; -inf when the row is empty or holds only NaN and -inf.
float MaxLogit(std::span<const float> logits);

// The id of the largest logit, ties to the lowest id (+0 and -0 tie); NaN never wins.
// 0 when no logit exceeds -inf (which is then also the lowest id of the all--inf tie).
int32_t ArgmaxLowestId(std::span<const float> logits);

}  // namespace peregrine
