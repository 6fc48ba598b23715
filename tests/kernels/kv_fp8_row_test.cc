// The device's FP8 KV row codec (kernels/common/kv_fp8_row.h), compiled for the host, against
// the model's format (model/deepseek_v4/kv_fp8.h, base/dtype.h) bit for bit: every e4m3 code
// and scale the kernels write is the one the CPU backend's FP8 cache rounds to.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/common/kv_fp8_row.h"
#include "model/deepseek_v4/kv_fp8.h"

namespace peregrine::kernels {
namespace {

float FromBits(uint32_t u) {
  float v = 0.0f;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

TEST(KvFp8RowTest, LayoutAlignsEveryPart) {
  const KvFp8RowLayout v4{512, 64};
  EXPECT_EQ(v4.nope(), 448);
  EXPECT_EQ(v4.blocks(), 7);
  EXPECT_EQ(v4.rope_offset(), 448);
  EXPECT_EQ(v4.scale_offset(), 576);
  EXPECT_EQ(v4.row_bytes(), 592);
  const KvFp8RowLayout small{64, 16};  // the test fixtures' width
  EXPECT_EQ(small.rope_offset(), 48);
  EXPECT_EQ(small.scale_offset(), 80);
  EXPECT_EQ(small.row_bytes(), 96);
  const KvFp8RowLayout odd{100, 6};  // a partial last block and unaligned parts
  EXPECT_EQ(odd.blocks(), 2);
  EXPECT_EQ(odd.rope_offset(), 96);
  EXPECT_EQ(odd.scale_offset(), 112);
  EXPECT_EQ(odd.row_bytes(), 128);
}

TEST(KvFp8RowTest, E4M3EncodeMatchesTheHostOverAWideSweep) {
  // Every float whose low 12 mantissa bits are a fixed pattern (all exponents and signs, the
  // rounding-relevant bits in all states), plus ties and the special values.
  for (uint32_t hi = 0; hi < (1u << 20); ++hi) {
    for (uint32_t low : {0x000u, 0x001u, 0x7ffu, 0x800u, 0xfffu}) {
      const float v = FromBits((hi << 12) | low);
      ASSERT_EQ(KvFp8EncodeE4M3(v), F32ToE4M3(v)) << std::hexfloat << v;
    }
  }
  for (float v : {0.0f, -0.0f, 448.0f, -448.0f, 464.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  0.015625f, 0.0009765625f, 0.00146484375f, 0.0029296875f})
    EXPECT_EQ(KvFp8EncodeE4M3(v), F32ToE4M3(v)) << v;
}

TEST(KvFp8RowTest, E4M3DecodeMatchesTheHostForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float expected = E4M3ToF32(code), got = KvFp8DecodeE4M3(code);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(got, expected) << c;
      EXPECT_EQ(std::signbit(got), std::signbit(expected)) << c;
    }
  }
}

TEST(KvFp8RowTest, ScalesMatchTheHostAndInvertExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> log_amax(-40.0f, 40.0f);
  std::vector<float> amaxes = {0.0f, 1e-5f, 1e-4f, 448.0f, 896.0f, 447.9f, 1.0f, 3.0e38f, 3.1e38f,
                               std::numeric_limits<float>::max()};
  for (int i = 0; i < 20000; ++i) amaxes.push_back(std::exp2(log_amax(rng)));
  for (float amax : amaxes) {
    // The host format's scale of a block whose largest value is amax.
    std::vector<float> block(64, 0.0f);
    block[5] = amax;
    const deepseek_v4::KvFp8Row q = deepseek_v4::QuantizeKvRow(block, 0);
    const uint8_t code = KvFp8ScaleCode(amax);
    ASSERT_EQ(code, q.scales[0]) << amax;
    EXPECT_EQ(KvFp8Scale(code), UE8M0ToF32(code));
    EXPECT_EQ(KvFp8Scale(code) * KvFp8InverseScale(code), 1.0f);
  }
  EXPECT_EQ(KvFp8ScaleCode(std::numeric_limits<float>::infinity()), KvFp8ScaleCode(448.0f));
}

TEST(KvFp8RowTest, BF16EncodeMatchesTheHost) {
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const float v = FromBits(static_cast<uint32_t>(rng()));
    const uint16_t expected = F32ToBF16(v);
    ASSERT_EQ(KvFp8EncodeBF16(v), expected) << v;
  }
}

TEST(KvFp8RowTest, RowsMatchTheModelsFormatAndDecodeToItsRoundTrip) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const KvFp8RowLayout layout : {KvFp8RowLayout{512, 64}, KvFp8RowLayout{64, 16}, KvFp8RowLayout{100, 6},
                                      KvFp8RowLayout{128, 0}}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> row(static_cast<size_t>(layout.dim));
      const float spread = std::exp2(static_cast<float>(trial % 25) - 12.0f);
      for (float& v : row) v = normal(rng) * spread;
      if (trial == 7) row[3] = std::numeric_limits<float>::quiet_NaN();
      if (trial == 9) row[1] = std::numeric_limits<float>::infinity();
      if (trial == 11) std::fill(row.begin(), row.end(), 0.0f);

      std::vector<uint8_t> stored(static_cast<size_t>(layout.row_bytes()), 0xcd);
      KvFp8EncodeRow(row.data(), layout, stored.data());
      const deepseek_v4::KvFp8Row q = deepseek_v4::QuantizeKvRow(row, layout.rope_dim);
      for (int i = 0; i < layout.nope(); ++i) ASSERT_EQ(stored[static_cast<size_t>(i)], q.nope[static_cast<size_t>(i)]);
      for (int b = 0; b < layout.blocks(); ++b)
        ASSERT_EQ(stored[static_cast<size_t>(layout.scale_offset() + b)], q.scales[static_cast<size_t>(b)]);
      for (int i = 0; i < layout.rope_dim; ++i) {
        uint16_t v = 0;
        std::memcpy(&v, stored.data() + layout.rope_offset() + 2 * i, sizeof v);
        ASSERT_EQ(v, q.rope[static_cast<size_t>(i)]);
      }
      // Padding is zero.
      for (int i = layout.nope(); i < layout.rope_offset(); ++i) EXPECT_EQ(stored[static_cast<size_t>(i)], 0);
      for (int i = layout.scale_offset() + layout.blocks(); i < layout.row_bytes(); ++i)
        EXPECT_EQ(stored[static_cast<size_t>(i)], 0);

      std::vector<float> decoded(row.size()), round_trip = row;
      KvFp8DecodeRow(stored.data(), layout, decoded.data());
      deepseek_v4::RoundTripKvRow(round_trip, layout.rope_dim);
      for (size_t i = 0; i < row.size(); ++i) {
        if (std::isnan(round_trip[i])) {
          EXPECT_TRUE(std::isnan(decoded[i]));
        } else {
          ASSERT_EQ(decoded[i], round_trip[i]) << "layout " << layout.dim << " trial " << trial << " value " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace peregrine::kernels
