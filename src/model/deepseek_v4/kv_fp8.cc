#include "model/deepseek_v4/kv_fp8.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/dtype.h"

namespace peregrine::deepseek_v4 {

namespace {

// 2^ceil(log2(max(amax, 1e-4) / 448)): the smallest power of two that puts amax within e4m3's
// range.
float BlockScale(float amax) {
  const float x = std::max(amax, 1e-4f) / 448.0f;
  int e = 0;
  const float m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}

// The scale of one block of values.
float BlockScaleOf(std::span<const float> block) {
  float amax = 0.0f;
  for (float v : block)
    if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
  return BlockScale(std::isinf(amax) ? 448.0f : amax);
}

}  // namespace

int64_t KvFp8RowBytes(int64_t dim, int64_t rope_dim) {
  const int64_t nope = dim - rope_dim;
  return nope + (nope + kKvFp8Block - 1) / kKvFp8Block + 2 * rope_dim;
}

KvFp8Row QuantizeKvRow(std::span<const float> row, int64_t rope_dim) {
  const auto dim = static_cast<int64_t>(row.size());
  PG_CHECK(rope_dim >= 0 && rope_dim <= dim);
  const int64_t nope = dim - rope_dim;
  KvFp8Row q;
  q.nope.resize(static_cast<size_t>(nope));
  q.scales.resize(static_cast<size_t>((nope + kKvFp8Block - 1) / kKvFp8Block));
  for (int64_t b = 0; b * kKvFp8Block < nope; ++b) {
    const int64_t begin = b * kKvFp8Block, end = std::min(nope, begin + kKvFp8Block);
    const float scale = BlockScaleOf(row.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
    q.scales[static_cast<size_t>(b)] = F32ToUE8M0(scale);
    for (int64_t i = begin; i < end; ++i)
      q.nope[static_cast<size_t>(i)] = F32ToE4M3(row[static_cast<size_t>(i)] / scale);
  }
  q.rope.resize(static_cast<size_t>(rope_dim));
  for (int64_t i = 0; i < rope_dim; ++i) q.rope[static_cast<size_t>(i)] = F32ToBF16(row[static_cast<size_t>(nope + i)]);
  return q;
}

void DequantizeKvRow(const KvFp8Row& q, std::span<float> row) {
  const auto nope = static_cast<int64_t>(q.nope.size());
  PG_CHECK(static_cast<int64_t>(row.size()) == nope + static_cast<int64_t>(q.rope.size()));
  for (int64_t i = 0; i < nope; ++i)
    row[static_cast<size_t>(i)] =
        E4M3ToF32(q.nope[static_cast<size_t>(i)]) * UE8M0ToF32(q.scales[static_cast<size_t>(i / kKvFp8Block)]);
  for (size_t i = 0; i < q.rope.size(); ++i) row[static_cast<size_t>(nope) + i] = BF16ToF32(q.rope[i]);
}

void RoundTripKvRow(std::span<float> row, int64_t rope_dim) {
  // Quantize then Dequantize, value by value: no allocation on the forward's hot path.
  const auto dim = static_cast<int64_t>(row.size());
  PG_CHECK(rope_dim >= 0 && rope_dim <= dim);
  const int64_t nope = dim - rope_dim;
  for (int64_t begin = 0; begin < nope; begin += kKvFp8Block) {
    const std::span<float> block = row.subspan(static_cast<size_t>(begin),
                                               static_cast<size_t>(std::min(kKvFp8Block, nope - begin)));
    const float scale = UE8M0ToF32(F32ToUE8M0(BlockScaleOf(block)));
    for (float& v : block) v = E4M3ToF32(F32ToE4M3(v / scale)) * scale;
  }
  for (float& v : row.subspan(static_cast<size_t>(nope))) v = BF16ToF32(F32ToBF16(v));
}

}  // namespace peregrine::deepseek_v4
