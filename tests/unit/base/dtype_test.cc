#include "base/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace peregrine {
namespace {

TEST(DTypeTest, E4M3RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float f = E4M3ToF32(code);
    if (std::isnan(f)) continue;
    if (f == 0.0f) continue;  // ±0 both decode to zero
    EXPECT_EQ(F32ToE4M3(f), code) << c;
  }
  EXPECT_EQ(E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F32ToE4M3(1e6f), 0x7e);      // saturates
  EXPECT_EQ(E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4M3ToF32(F32ToE4M3(1.0625f)), 1.0f);   // tie to even
  EXPECT_EQ(E4M3ToF32(F32ToE4M3(1.1875f)), 1.25f);  // tie to even
}

TEST(DTypeTest, BF16AndF16) {
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.0f)), 1.0f);
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.00390625f)), 1.0f);   // tie to even
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.01171875f)), 1.015625f);
  for (int c = 0; c < 0x7c00; ++c) EXPECT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(c))), c);
  EXPECT_EQ(F16ToF32(F32ToF16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
}

TEST(DTypeTest, UE8M0AndE2M1) {
  EXPECT_EQ(UE8M0ToF32(127), 1.0f);
  EXPECT_EQ(UE8M0ToF32(130), 8.0f);
  EXPECT_EQ(F32ToUE8M0(0.25f), 125);
  const float values[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    const float f = E2M1ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(f, (c & 8 ? -1.0f : 1.0f) * values[c & 7]);
    if (c != 8) {
      EXPECT_EQ(F32ToE2M1(f), c);
    }
  }
  EXPECT_EQ(E2M1ToF32(F32ToE2M1(5.0f)), 4.0f);  // tie to even
  EXPECT_EQ(E2M1ToF32(F32ToE2M1(100.0f)), 6.0f);
}

TEST(DTypeTest, SafetensorsNames) {
  EXPECT_EQ(DTypeFromSafetensors("F8_E8M0"), DType::kUE8M0);
  EXPECT_EQ(DTypeFromSafetensors("BF16"), DType::kBF16);
  EXPECT_FALSE(DTypeFromSafetensors("F128").has_value());
  EXPECT_EQ(DTypeBytes(DType::kE2M1, 3), 2u);
}

}  // namespace
}  // namespace peregrine
