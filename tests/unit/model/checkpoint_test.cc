// Checkpoint: dialect mapping, every stored encoding read back as f32 / i64, zero-copy reads.
#include "model/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "safetensors_writer.h"

namespace peregrine {
namespace {

using testing::Bytes;
using testing::SafetensorsBuilder;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

std::vector<float> Iota(size_t n, float start = 0.5f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

std::unique_ptr<Checkpoint> OpenOk(const std::filesystem::path& dir) {
  auto r = Checkpoint::Open(dir);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(CheckpointTest, HfNamesMapToCanonical) {
  TempDir dir("ckpt_names");
  WriteBytes(dir / "model.safetensors",
             SafetensorsBuilder()
                 .F32("model.embed_tokens.weight", {4, 2}, Iota(8))
                 .F32("head.weight", {4, 2}, Iota(8, 10))
                 .F32("model.hc_head.hc_fn", {2, 4}, Iota(8))
                 .F32("model.hc_head.hc_base", {2}, Iota(2))
                 .F32("model.hc_head.hc_scale", {1}, Iota(1))
                 .F32("model.layers.0.attn.norm.weight", {2}, Iota(2))
                 .F32("model.layers.0.attn.compressor.norm.weight", {2}, Iota(2))
                 .F32("model.layers.12.attn.wq_a.weight", {2, 2}, Iota(4))
                 .F32("model.norm.weight", {2}, Iota(2))
                 .F32("mtp.0.enorm.weight", {2}, Iota(2))
                 .Build());
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  const std::vector<std::string> want = {"embed.weight",
                                         "hc_head_base",
                                         "hc_head_fn",
                                         "hc_head_scale",
                                         "head.weight",
                                         "layers.0.attn.compressor.norm.weight",
                                         "layers.0.attn.kv_norm.weight",
                                         "layers.12.attn.wq_a.weight",
                                         "mtp.0.enorm.weight",
                                         "norm.weight"};
  EXPECT_EQ(ckpt->CanonicalNames(), want);
  EXPECT_TRUE(ckpt->Has("embed.weight"));
  EXPECT_FALSE(ckpt->Has("model.embed_tokens.weight"));
  auto head = ckpt->ReadF32("head.weight", Shape{4, 2});
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->f32()[7], 17.0f);
  EXPECT_EQ(ckpt->TotalBytes(), 4u * (8 + 8 + 8 + 2 + 1 + 2 + 2 + 4 + 2 + 2));
}

TEST(CheckpointTest, HfModuleNamesAndFusedExperts) {
  TempDir dir("ckpt_fused");
  // gate_up [E=2, 2I=4, H=3], down [E=2, H=3, I=2].
  WriteBytes(dir / "model.safetensors",
             SafetensorsBuilder()
                 .F32("model.layers.1.self_attn.q_a_proj.weight", {2, 2}, Iota(4))
                 .F32("model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight",
                      {2, 2}, Iota(4))
                 .F32("model.layers.1.mlp.gate.e_score_correction_bias", {2}, Iota(2))
                 .F32("model.layers.1.attn_hc.fn", {2}, Iota(2))
                 .F32("model.layers.1.mlp.experts.gate_up_proj", {2, 4, 3}, Iota(24, 0))
                 .F32("model.layers.1.mlp.experts.down_proj", {2, 3, 2}, Iota(12, 100))
                 .Build());
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  EXPECT_TRUE(ckpt->Has("layers.1.attn.wq_a.weight"));
  EXPECT_TRUE(ckpt->Has("layers.1.attn.indexer.weights_proj.weight"));
  EXPECT_TRUE(ckpt->Has("layers.1.ffn.gate.bias"));
  EXPECT_TRUE(ckpt->Has("layers.1.hc_attn_fn"));
  auto w3 = ckpt->ReadF32("layers.1.ffn.experts.1.w3.weight", Shape{2, 3});
  ASSERT_TRUE(w3.ok()) << w3.status().ToString();
  EXPECT_EQ(w3->f32()[0], 18.0f);  // expert 1 starts at 12; w3 is its second half (+6)
  EXPECT_EQ(w3->storage, nullptr);
  auto w2 = ckpt->ReadF32("layers.1.ffn.experts.1.w2.weight", Shape{3, 2});
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(w2->f32()[5], 111.0f);
  EXPECT_TRUE(ckpt->Has("layers.1.ffn.experts.0.w1.weight"));
  EXPECT_FALSE(ckpt->Has("layers.1.ffn.experts.2.w1.weight"));
}

TEST(CheckpointTest, F32IsBorrowedOtherTypesConvert) {
  TempDir dir("ckpt_types");
  const std::vector<float> values = {1.0f, -2.5f, 0.375f, 3e-3f};
  std::vector<uint16_t> bf16, f16;
  for (float v : values) {
    bf16.push_back(F32ToBF16(v));
    f16.push_back(F32ToF16(v));
  }
  std::vector<uint8_t> e4m3;
  for (float v : values) e4m3.push_back(F32ToE4M3(v));
  WriteBytes(dir / "a.safetensors",
             SafetensorsBuilder()
                 .Add("i64", "I64", {3}, Bytes(std::vector<int64_t>{7, -1, 1LL << 40}))
                 .F32("f32", {2, 2}, values)
                 .Add("bf16", "BF16", {4}, Bytes(bf16))
                 .Add("f16", "F16", {4}, Bytes(f16))
                 .Add("fp8.weight", "F8_E4M3", {4}, e4m3)
                 .Add("i32", "I32", {3}, Bytes(std::vector<int32_t>{7, -1, 5}))
                 .Build());
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  auto f32 = ckpt->ReadF32("f32", Shape{2, 2});
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->storage, nullptr);  // zero copy
  EXPECT_EQ(f32->view.dtype, DType::kF32);
  EXPECT_EQ(f32->f32()[1], -2.5f);
  for (const char* name : {"bf16", "f16", "fp8.weight"}) {
    auto t = ckpt->ReadF32(name, Shape{4});
    ASSERT_TRUE(t.ok()) << name << t.status().ToString();
    EXPECT_NE(t->storage, nullptr);
    for (size_t i = 0; i < 4; ++i) {
      const float want = std::string(name) == "bf16"  ? RoundBF16(values[i])
                         : std::string(name) == "f16" ? F16ToF32(F32ToF16(values[i]))
                                                      : E4M3ToF32(F32ToE4M3(values[i]));
      EXPECT_EQ(t->f32()[i], want) << name << " " << i;
    }
  }
  auto i64 = ckpt->ReadI64("i64", Shape{3});
  ASSERT_TRUE(i64.ok());
  EXPECT_EQ(i64->storage, nullptr);
  EXPECT_EQ(i64->i64()[2], 1LL << 40);
  auto i32 = ckpt->ReadI64("i32", Shape{3});
  ASSERT_TRUE(i32.ok());
  EXPECT_EQ(i32->i64()[1], -1);
  EXPECT_EQ(i32->view.dtype, DType::kI64);
  // The stored bf16 values, borrowed from the mapping; other types say they are not bf16.
  auto raw = ckpt->ReadBF16("bf16", Shape{4});
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_TRUE(raw->has_value());
  EXPECT_EQ((*raw)->storage, nullptr);
  EXPECT_EQ((*raw)->view.dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp((*raw)->view.data, bf16.data(), bf16.size() * 2), 0);
  for (const char* name : {"f32", "f16", "fp8.weight"}) {
    auto none = ckpt->ReadBF16(name, std::string(name) == "f32" ? Shape{2, 2} : Shape{4});
    ASSERT_TRUE(none.ok()) << name;
    EXPECT_FALSE(none->has_value()) << name;
  }
  EXPECT_FALSE(ckpt->ReadBF16("bf16", Shape{2, 2}).ok());  // another shape
  EXPECT_FALSE(ckpt->ReadBF16("missing", Shape{4}).ok());
}

TEST(CheckpointTest, UnalignedF32IsCopied) {
  TempDir dir("ckpt_unaligned");
  WriteBytes(dir / "a.safetensors",
             SafetensorsBuilder().F32("x", {3}, {1, 2, 3}).Build(/*align=*/1));
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  auto x = ckpt->ReadF32("x", Shape{3});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->f32()[2], 3.0f);
}

TEST(CheckpointTest, Fp8BlockScales) {
  // [130, 260]: partial 128-blocks in both directions, scale [2, 3].
  const int64_t rows = 130, cols = 260;
  std::vector<uint8_t> w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) {
    const auto code = static_cast<uint8_t>((i * 37) % 256);
    w[i] = (code & 0x7f) == 0x7f ? 1 : code;  // skip the two NaN codes
  }
  std::vector<uint8_t> scale = {127, 120, 130, 100, 127, 140};
  TempDir dir("ckpt_fp8");
  WriteBytes(dir / "a.safetensors",
             SafetensorsBuilder()
                 .Add("layers.0.attn.wq_a.weight", "F8_E4M3", {rows, cols}, w)
                 .Add("layers.0.attn.wq_a.scale", "F8_E8M0", {2, 3}, scale)
                 .Build());
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(ckpt->CanonicalNames(), std::vector<std::string>{"layers.0.attn.wq_a.weight"});
  auto t = ckpt->ReadF32("layers.0.attn.wq_a.weight", Shape{rows, cols});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const float want =
          E4M3ToF32(w[i]) * UE8M0ToF32(scale[static_cast<size_t>((r / 128) * 3 + c / 128)]);
      ASSERT_EQ(t->f32()[i], want) << r << "," << c;
    }
}

TEST(CheckpointTest, Fp8BlocksReadAsStored) {
  // The codes as stored and the UE8M0 scales as f32; other encodings say nullopt.
  const int64_t rows = 130, cols = 260;
  std::vector<uint8_t> w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>((i * 53) % 127);
  std::vector<uint8_t> scale = {127, 120, 130, 100, 127, 140};
  TempDir dir("ckpt_fp8_blocks");
  WriteBytes(dir / "a.safetensors",
             SafetensorsBuilder()
                 .Add("layers.0.attn.wq_b.weight", "F8_E4M3", {rows, cols}, w)
                 .Add("layers.0.attn.wq_b.scale", "F8_E8M0", {2, 3}, scale)
                 .Add("layers.0.attn.wkv.weight", "F32", {2, 2}, Bytes(std::vector<float>{1, 2, 3, 4}))
                 .Build());
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  auto blocks = ckpt->ReadFp8Blocks("layers.0.attn.wq_b.weight", Shape{rows, cols});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_TRUE(blocks->has_value());
  const Fp8BlockTensor& b = **blocks;
  EXPECT_EQ(b.codes.view.dtype, DType::kF8E4M3);
  EXPECT_EQ(b.codes.view.shape, (Shape{rows, cols}));
  EXPECT_EQ(std::memcmp(b.codes.view.data, w.data(), w.size()), 0);
  ASSERT_EQ(b.scales.view.shape, (Shape{2, 3}));
  for (size_t i = 0; i < scale.size(); ++i) EXPECT_EQ(b.scales.f32()[i], UE8M0ToF32(scale[i])) << i;
  auto plain = ckpt->ReadFp8Blocks("layers.0.attn.wkv.weight", Shape{2, 2});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->has_value());
  auto not_fp4 = ckpt->ReadMxfp4("layers.0.attn.wq_b.weight", Shape{rows, cols});
  ASSERT_TRUE(not_fp4.ok()) << not_fp4.status().ToString();
  EXPECT_FALSE(not_fp4->has_value());
  EXPECT_EQ(ckpt->ReadFp8Blocks("layers.0.attn.wq_b.weight", Shape{rows, 128}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ckpt->ReadFp8Blocks("layers.0.attn.wq_a.weight", Shape{2, 2}).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, Mxfp4ExpertsAsI8AndF4) {
  const int64_t rows = 3, cols = 64;  // two 32-blocks per row
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2));
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i * 29 + 3);
  std::vector<uint8_t> scale = {127, 128, 126, 120, 130, 127};
  TempDir dir("ckpt_fp4");
  WriteBytes(dir / "a.safetensors",
             SafetensorsBuilder()
                 .Add("layers.3.ffn.experts.5.w1.weight", "I8", {rows, cols / 2}, packed)
                 .Add("layers.3.ffn.experts.5.w1.scale", "F8_E8M0", {rows, 2}, scale)
                 .Add("f4.weight", "F4", {rows, cols}, packed)
                 .Add("f4.scale", "F8_E8M0", {rows, 2}, scale)
                 .Build());
  auto ckpt = OpenOk(dir.path());
  ASSERT_NE(ckpt, nullptr);
  auto shape = ckpt->LogicalShape("layers.3.ffn.experts.5.w1.weight");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, (Shape{rows, cols}));
  for (const char* name : {"layers.3.ffn.experts.5.w1.weight", "f4.weight"}) {
    auto t = ckpt->ReadF32(name, Shape{rows, cols});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const uint8_t byte = packed[i / 2];
        const uint8_t nibble = c % 2 == 0 ? (byte & 0xf) : static_cast<uint8_t>(byte >> 4);
        const float want =
            E2M1ToF32(nibble) * UE8M0ToF32(scale[static_cast<size_t>(r * 2 + c / 32)]);
        ASSERT_EQ(t->f32()[i], want) << name << " " << r << "," << c;
      }
  }
  // The stored bytes, for backends that compute on MXFP4.
  for (const char* name : {"layers.3.ffn.experts.5.w1.weight", "f4.weight"}) {
    auto m = ckpt->ReadMxfp4(name, Shape{rows, cols});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE(m->has_value()) << name;
    EXPECT_EQ((*m)->codes.view.shape, (Shape{rows, cols / 2}));
    EXPECT_EQ(std::memcmp((*m)->codes.view.data, packed.data(), packed.size()), 0);
    EXPECT_EQ((*m)->scales.view.shape, (Shape{rows, 2}));
    EXPECT_EQ(std::memcmp((*m)->scales.view.data, scale.data(), scale.size()), 0);
  }
  EXPECT_EQ(ckpt->ReadMxfp4("f4.weight", Shape{rows, cols / 2}).status().code(), StatusCode::kInvalidArgument);
  // Asking for the stored (packed) shape is a shape error naming both shapes.
  auto wrong = ckpt->ReadF32("layers.3.ffn.experts.5.w1.weight", Shape{rows, cols / 2});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("[3, 64], expected [3, 32]"), std::string::npos)
      << wrong.status().ToString();
}

}  // namespace
}  // namespace peregrine
