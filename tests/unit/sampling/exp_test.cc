#include "sampling/exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace peregrine {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

double UlpError(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const double ulp = std::nextafter(rounded, kInf) - rounded;
  return std::abs(static_cast<double>(got) - exact) / ulp;
}

TEST(ExpNonPositiveTest, WithinTwoUlpOverTheWholeRange) {
  double worst = 0.0;
  float worst_y = 0.0f;
  for (int i = 0; i <= 2000000; ++i) {
    const float y = -87.0f * static_cast<float>(i) / 2000000.0f;
    const double err = UlpError(ExpNonPositive(y), std::exp(static_cast<double>(y)));
    if (err > worst) {
      worst = err;
      worst_y = y;
    }
  }
  EXPECT_LE(worst, 2.0) << "at y = " << worst_y;
}

TEST(ExpNonPositiveTest, SpecialValues) {
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(3.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-87.5f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-1e30f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-kInf), 0.0f);
  EXPECT_EQ(ExpNonPositive(kNan), 0.0f);
  EXPECT_GT(ExpNonPositive(-87.0f), 0.0f);
}

// The exponential uses basic IEEE operations only, so these bits hold on every platform.
TEST(ExpNonPositiveTest, BitsArePinned) {
  EXPECT_EQ(std::bit_cast<uint32_t>(ExpNonPositive(-1.0f)), 0x3EBC5AB2u);
  EXPECT_EQ(std::bit_cast<uint32_t>(ExpNonPositive(-10.5f)), 0x37E6FE13u);
}

double UlpErrorDouble(double got, long double exact) {
  const double rounded = static_cast<double>(exact);
  const long double ulp = std::nextafter(rounded, static_cast<double>(kInf)) - rounded;
  return static_cast<double>(std::abs(static_cast<long double>(got) - exact) / ulp);
}

TEST(ExpNonPositiveDoubleTest, WithinTwoUlpOverTheWholeRange) {
  double worst = 0.0;
  double worst_y = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const double y = -708.0 * i / 2000000.0 - 1e-9 * (i % 7);
    if (y < -708.0) continue;
    const double err = UlpErrorDouble(ExpNonPositiveDouble(y), std::exp(static_cast<long double>(y)));
    if (err > worst) {
      worst = err;
      worst_y = y;
    }
  }
  EXPECT_LE(worst, 2.0) << "at y = " << worst_y;
}

TEST(ExpNonPositiveDoubleTest, SpecialValues) {
  EXPECT_EQ(ExpNonPositiveDouble(0.0), 1.0);
  EXPECT_EQ(ExpNonPositiveDouble(-0.0), 1.0);
  EXPECT_EQ(ExpNonPositiveDouble(5.0), 1.0);
  EXPECT_EQ(ExpNonPositiveDouble(-709.0), 0.0);
  EXPECT_EQ(ExpNonPositiveDouble(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(ExpNonPositiveDouble(std::numeric_limits<double>::quiet_NaN()), 0.0);
  EXPECT_EQ(ExpNonPositiveDouble(-1.0), 0x1.78b56362cef38p-2);  // exp(-1) correctly rounded
}

}  // namespace
}  // namespace peregrine
