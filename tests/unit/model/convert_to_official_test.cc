// tools/convert_to_official.py: the official-dialect output (FP8 + MXFP4 + BF16, sharded,
// legacy config keys) must read back bit-identical to the f32 HF-dialect "dequantised" output,
// both configs must parse to the same ModelConfig, and the quantised values must follow the
// documented rounding rules (re-derived here with the C++ conversions from the f32 input).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "config/model_config.h"
#include "model/checkpoint.h"
#include "model/dequant.h"
#include "safetensors_writer.h"

namespace peregrine {
namespace {

const std::filesystem::path kSourceDir = PEREGRINE_SOURCE_DIR;
const std::filesystem::path kPython = PEREGRINE_PYTHON;

int RunCommand(const std::string& command) {
  return std::system((command + " > /dev/null").c_str());
}

std::string Quoted(const std::filesystem::path& p) {
  std::string quoted = "'";
  quoted += p.string();
  quoted += "'";
  return quoted;
}

enum class Rule { kFp8, kMxfp4, kBf16, kF32 };

// The converter's storage rule for a canonical name (see tools/convert_to_official.py).
Rule RuleFor(const std::string& name) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string::npos; };
  const auto ends = [&](std::string_view s) { return std::string_view(name).ends_with(s); };
  if (has(".ffn.experts.")) return Rule::kMxfp4;
  if (has(".ffn.shared_experts.") || has(".attn.indexer.wq_b.")) return Rule::kFp8;
  for (const char* w : {".attn.wq_a.weight", ".attn.wq_b.weight", ".attn.wkv.weight",
                        ".attn.wo_a.weight", ".attn.wo_b.weight"})
    if (ends(w)) return Rule::kFp8;
  if (has("attn_sink") || has("hc_") || ends(".ape") || ends(".gate.bias")) return Rule::kF32;
  return Rule::kBf16;
}

// Smallest power of two >= max(amax, 1e-4) / qmax.
float Pow2Scale(float amax, double qmax) {
  int e = 0;
  const double m = std::frexp(std::max<double>(amax, 1e-4) / qmax, &e);
  return std::ldexp(1.0f, m == 0.5 ? e - 1 : e);
}

// What the official directory should hold for `w` (logical [rows, cols] or 1-D).
std::vector<float> ExpectedDequant(Rule rule, const HostTensor& t) {
  const float* w = t.f32();
  const auto n = static_cast<size_t>(t.view.numel());
  std::vector<float> out(w, w + n);
  if (rule == Rule::kF32) return out;
  if (rule == Rule::kBf16) {
    for (float& v : out) v = RoundBF16(v);
    return out;
  }
  const int64_t rows = t.view.shape[0], cols = t.view.shape[1];
  const int64_t block_rows = rule == Rule::kFp8 ? 128 : 1;
  const int64_t block_cols = rule == Rule::kFp8 ? 128 : 32;
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t r1 = std::min(rows, r0 + block_rows), c1 = std::min(cols, c0 + block_cols);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const float s = Pow2Scale(amax, rule == Rule::kFp8 ? 448.0 : 6.0);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float q = w[r * cols + c] / s;
          out[static_cast<size_t>(r * cols + c)] =
              (rule == Rule::kFp8 ? E4M3ToF32(F32ToE4M3(q)) : E2M1ToF32(F32ToE2M1(q))) * s;
        }
    }
  }
  return out;
}

bool BitEqual(const HostTensor& a, const float* b, size_t n) {
  return std::memcmp(a.f32(), b, n * sizeof(float)) == 0;
}

// Converts `hf_dir` and checks the three directories against each other.
void CheckConversion(const std::filesystem::path& hf_dir, const testing::TempDir& out) {
  const auto official_dir = out / "official";
  const auto dequantised_dir = out / "dequantised";
  ASSERT_EQ(RunCommand(Quoted(kPython) + " " + Quoted(kSourceDir / "tools/convert_to_official.py") +
                       " " + Quoted(hf_dir) + " --official " + Quoted(official_dir) +
                       " --dequantised " + Quoted(dequantised_dir)),
            0);
  ASSERT_TRUE(std::filesystem::exists(official_dir / "model.safetensors.index.json"));

  const auto hf_config = LoadModelConfig(hf_dir);
  const auto official_config = LoadModelConfig(official_dir);
  const auto dequantised_config = LoadModelConfig(dequantised_dir);
  ASSERT_TRUE(hf_config.ok()) << hf_config.status().ToString();
  ASSERT_TRUE(official_config.ok()) << official_config.status().ToString();
  ASSERT_TRUE(dequantised_config.ok()) << dequantised_config.status().ToString();
  EXPECT_TRUE(*official_config == *dequantised_config);
  EXPECT_TRUE(*official_config == *hf_config);

  auto hf = Checkpoint::Open(hf_dir);
  auto official = Checkpoint::Open(official_dir);
  auto dequantised = Checkpoint::Open(dequantised_dir);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(official.ok()) << official.status().ToString();
  ASSERT_TRUE(dequantised.ok()) << dequantised.status().ToString();
  const auto names = (*dequantised)->CanonicalNames();
  ASSERT_EQ((*official)->CanonicalNames(), names);
  ASSERT_EQ((*hf)->CanonicalNames(), names);
  EXPECT_LT((*official)->TotalBytes(), (*dequantised)->TotalBytes() / 2);

  int num_fp8 = 0, num_mxfp4 = 0;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const auto shape = (*dequantised)->LogicalShape(name);
    ASSERT_TRUE(shape.ok()) << shape.status().ToString();
    const auto official_shape = (*official)->LogicalShape(name);
    ASSERT_TRUE(official_shape.ok()) << official_shape.status().ToString();
    ASSERT_EQ(*official_shape, *shape);
    if (std::string_view(name).ends_with("tid2eid")) {
      const auto a = (*official)->ReadI64(name, *shape);
      const auto b = (*dequantised)->ReadI64(name, *shape);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(std::memcmp(a->i64(), b->i64(), static_cast<size_t>(shape->numel()) * 8), 0);
      continue;
    }
    const auto a = (*official)->ReadF32(name, *shape);
    const auto b = (*dequantised)->ReadF32(name, *shape);
    const auto original = (*hf)->ReadF32(name, *shape);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_TRUE(original.ok()) << original.status().ToString();
    const auto n = static_cast<size_t>(shape->numel());
    EXPECT_TRUE(BitEqual(*a, b->f32(), n)) << "official and dequantised differ";
    const Rule rule = RuleFor(name);
    num_fp8 += rule == Rule::kFp8;
    num_mxfp4 += rule == Rule::kMxfp4;
    const std::vector<float> want = ExpectedDequant(rule, *original);
    EXPECT_TRUE(BitEqual(*a, want.data(), n)) << "quantisation rule not followed";
    if (rule == Rule::kMxfp4) {
      // The loader's own quantiser (QuantizeMxfp4, for backends keeping experts in MXFP4 when
      // a checkpoint stores them in float) gives the converter's bytes.
      const int64_t rows = (*shape)[0], cols = (*shape)[1];
      std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2)), scales(static_cast<size_t>(rows * cols / 32));
      QuantizeMxfp4(original->f32(), rows, cols, packed.data(), scales.data());
      const auto stored = (*official)->ReadMxfp4(name, *shape);
      ASSERT_TRUE(stored.ok()) << stored.status().ToString();
      ASSERT_TRUE(stored->has_value());
      EXPECT_EQ(std::memcmp((*stored)->codes.view.data, packed.data(), packed.size()), 0) << "e2m1 codes differ";
      EXPECT_EQ(std::memcmp((*stored)->scales.view.data, scales.data(), scales.size()), 0) << "scales differ";
    }
  }
  EXPECT_GT(num_fp8, 0);
  EXPECT_GT(num_mxfp4, 0);
}

bool HavePython() {
  return std::filesystem::exists(kPython) &&
         RunCommand(Quoted(kPython) + " -c 'import numpy, safetensors'") == 0;
}

TEST(ConvertToOfficialTest, GeneratedCheckpoint) {
  if (!HavePython()) GTEST_SKIP() << "no test venv with numpy + safetensors (tools/setup.sh)";
  testing::TempDir out("convert");
  const auto hf_dir = out / "hf";
  ASSERT_EQ(RunCommand(Quoted(kPython) + " " +
                       Quoted(kSourceDir / "tests/unit/model/make_hf_checkpoint.py") + " " +
                       Quoted(hf_dir)),
            0);
  CheckConversion(hf_dir, out);
}

TEST(ConvertToOfficialTest, HfGoldenFixture) {
  const auto fixture = kSourceDir / "tests/fixtures/v4_tiny_yarn/model";
  if (!HavePython()) GTEST_SKIP() << "no test venv with numpy + safetensors (tools/setup.sh)";
  if (!std::filesystem::exists(fixture / "config.json")) GTEST_SKIP() << "no HF fixture";
  testing::TempDir out("convert_fixture");
  CheckConversion(fixture, out);
}

}  // namespace
}  // namespace peregrine
