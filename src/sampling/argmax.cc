// MaxLogit and ArgmaxLowestId. The max keeps independent running maxima in four-wide vectors of
// the GCC/Clang vector extension (the element-wise select becomes a vector max on every target;
// the auto-vectorizer leaves a float max reduction scalar without fast-math), and the argmax
// visits a block's values again only when the block beats the best so far, so memory is
// streamed once.
#include "sampling/argmax.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace peregrine {
namespace {

using Float4 = float __attribute__((vector_size(16)));

constexpr size_t kArgmaxBlock = 512;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Float4 Load(const float* x) {
  Float4 v;
  std::memcpy(&v, x, sizeof(v));
  return v;
}

// NaN in `v` never replaces the running maximum: the comparison is false.
Float4 Max(Float4 v, Float4 m) { return v > m ? v : m; }

}  // namespace

float MaxLogit(std::span<const float> logits) {
  const float* x = logits.data();
  const size_t n = logits.size();
  const Float4 neg_inf = {kNegInf, kNegInf, kNegInf, kNegInf};
  Float4 m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = Max(Load(x + i), m0);
    m1 = Max(Load(x + i + 4), m1);
    m2 = Max(Load(x + i + 8), m2);
    m3 = Max(Load(x + i + 12), m3);
  }
  const Float4 m = Max(Max(m0, m1), Max(m2, m3));
  float best = kNegInf;
  for (int j = 0; j < 4; ++j) best = m[j] > best ? m[j] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

int32_t ArgmaxLowestId(std::span<const float> logits) {
  const size_t n = logits.size();
  float best = kNegInf;
  size_t best_id = 0;
  for (size_t begin = 0; begin < n; begin += kArgmaxBlock) {
    const size_t size = std::min(kArgmaxBlock, n - begin);
    const float block_max = MaxLogit(logits.subspan(begin, size));
    // Strictly greater: an earlier block keeps a tie.
    if (!(block_max > best)) continue;
    best = block_max;
    for (size_t j = begin; j < begin + size; ++j) {
      if (logits[j] == block_max) {
        best_id = j;
        break;
      }
    }
  }
  return static_cast<int32_t>(best_id);
}

}  // namespace peregrine
