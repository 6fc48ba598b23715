#include "sampling/weights.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace peregrine {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(TemperatureWeightTest, MaximumIsOneAndNonNumbersAreZero) {
  EXPECT_EQ(TemperatureWeight(5.0f, 5.0f, 1.0f), 1.0f);
  EXPECT_EQ(TemperatureWeight(-kInf, 5.0f, 1.0f), 0.0f);
  EXPECT_EQ(TemperatureWeight(kNan, 5.0f, 1.0f), 0.0f);
  EXPECT_EQ(TemperatureWeight(kInf, kInf, 1.0f), 1.0f);
  EXPECT_EQ(TemperatureWeight(3.0f, kInf, 1.0f), 0.0f);
  EXPECT_EQ(TemperatureWeight(-kInf, -kInf, 1.0f), 1.0f);  // an all -inf row is uniform
  EXPECT_NEAR(TemperatureWeight(4.0f, 5.0f, 2.0f), std::exp(-2.0), 1e-7);
}

TEST(TemperatureWeightTest, SubnormalTemperatureStaysFinite) {
  const float inv = InverseTemperature(1e-45f);
  EXPECT_EQ(inv, std::numeric_limits<float>::max());
  EXPECT_EQ(TemperatureWeight(1.0f, 1.0f, inv), 1.0f);
  EXPECT_EQ(TemperatureWeight(0.5f, 1.0f, inv), 0.0f);
  EXPECT_EQ(InverseTemperature(0.5f), 2.0f);
}

TEST(ComputeWeightsTest, MatchesTheScalarFormulaBitForBit) {
  std::vector<float> logits;
  for (int i = 0; i < 1001; ++i) logits.push_back(static_cast<float>((i * 7919) % 2003) / 50.0f - 20.0f);
  logits[5] = kNan;
  logits[6] = -kInf;
  std::vector<float> out(logits.size());
  ComputeWeights(logits, 20.0f, 1.3f, out);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float expected = TemperatureWeight(logits[i], 20.0f, 1.3f);
    EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected)) << i;
  }
}

}  // namespace
}  // namespace peregrine
