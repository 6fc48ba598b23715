// The official release's dialect (names without `model.`, FP8 e4m3 weights with UE8M0
// 128x128 block scales, MXFP4 routed experts, legacy config keys) loads into the same model:
// a fixture converted by tools/convert_to_official.py must give exactly the logits of the
// same model stored in f32 with the quantised values dequantised, and stay near the
// unquantised goldens within what FP8/FP4 rounding of the weights allows.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "golden.h"
#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4 {
namespace {

namespace fs = std::filesystem;

// Quantising every projection to FP8 and every routed expert to FP4 moves the logits of
// these tiny random models by a few tens of percent (FP4 keeps ~2 significant bits); the
// measured figures are printed. The bound only catches a loader that reads garbage.
constexpr double kQuantisedTolerance = 0.6;

class OfficialDialectTest : public ::testing::TestWithParam<fs::path> {};

TEST_P(OfficialDialectTest, LoadsAndMatchesDequantisedModel) {
  const fs::path out = fs::path(::testing::TempDir()) / ("official_" + GetParam().filename().string());
  fs::remove_all(out);
  const std::string cmd = std::string(PEREGRINE_PYTHON) + " " + PEREGRINE_SOURCE_DIR +
                          "/tools/convert_to_official.py " + (GetParam() / "model").string() + " --official " +
                          (out / "official").string() + " --dequantised " + (out / "dequantised").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(fs::exists(out / "official" / "model.safetensors.index.json"));

  auto golden = testing::ReadGolden(GetParam() / "golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  auto official = Model::Load(out / "official", 2);
  ASSERT_TRUE(official.ok()) << official.status().ToString();
  auto dequantised = Model::Load(out / "dequantised", 2);
  ASSERT_TRUE(dequantised.ok()) << dequantised.status().ToString();

  std::vector<float> a, b;
  SequenceState sa = (*official)->NewSequence(), sb = (*dequantised)->NewSequence();
  ASSERT_TRUE((*official)->Forward(sa, golden->prompt_ids, true, &a).ok());
  ASSERT_TRUE((*dequantised)->Forward(sb, golden->prompt_ids, true, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "rel L2 " << testing::RelativeL2(a.data(), b.data(), static_cast<int64_t>(a.size()));
  const double err = testing::RelativeL2(a.data(), golden->full_logits.data(), static_cast<int64_t>(a.size()));
  std::printf("%s quantised (FP8 + MXFP4) vs unquantised reference: rel L2 %.3e\n",
              GetParam().filename().c_str(), err);
  EXPECT_LE(err, kQuantisedTolerance);
  EXPECT_GT(err, 0.0);  // the weights really were quantised
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OfficialDialectTest, ::testing::ValuesIn(testing::FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine::deepseek_v4
