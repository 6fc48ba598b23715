// Crafted broken checkpoints: each must come back as a Status naming the file and the tensor.
#include <gtest/gtest.h>

#include <string>

#include "config/model_config.h"
#include "model/checkpoint.h"
#include "safetensors_writer.h"

namespace peregrine {
namespace {

using testing::Bytes;
using testing::RawSafetensors;
using testing::SafetensorsBuilder;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

// Opens `dir` expecting failure with `code` and every needle in the message.
void ExpectOpenError(const TempDir& dir, StatusCode code, std::vector<std::string> needles) {
  const auto r = Checkpoint::Open(dir.path());
  ASSERT_FALSE(r.ok()) << needles[0];
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  for (const auto& n : needles)
    EXPECT_NE(r.status().message().find(n), std::string::npos)
        << "missing '" << n << "' in: " << r.status().ToString();
}

std::vector<uint8_t> TwoTensors() {
  return SafetensorsBuilder()
      .F32("model.layers.0.attn.wq_a.weight", {4, 4}, std::vector<float>(16, 1.0f))
      .F32("model.layers.0.attn.wq_b.weight", {4, 4}, std::vector<float>(16, 2.0f))
      .Build();
}

std::vector<uint8_t> Crafted(const std::string& header, size_t data_bytes) {
  return RawSafetensors(header, std::vector<uint8_t>(data_bytes, 0));
}

TEST(CheckpointErrorsTest, MissingOrEmptyDirectory) {
  TempDir dir("err_empty");
  ExpectOpenError(dir, StatusCode::kNotFound,
                  {dir.path().string(), "no model.safetensors.index.json"});
  const auto r = Checkpoint::Open(dir / "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  WriteBytes(dir / "model.safetensors", {});
  ExpectOpenError(dir, StatusCode::kDataLoss, {"model.safetensors", "0 bytes"});
}

TEST(CheckpointErrorsTest, TruncatedFile) {
  TempDir dir("err_trunc");
  auto image = TwoTensors();
  image.resize(image.size() - 10);  // cut into the second tensor's data
  WriteBytes(dir / "model.safetensors", image);
  ExpectOpenError(dir, StatusCode::kDataLoss,
                  {"model.safetensors", "model.layers.0.attn.wq_b.weight", "outside"});
}

TEST(CheckpointErrorsTest, HeaderLongerThanFile) {
  TempDir dir("err_hdrlen");
  auto image = TwoTensors();
  image[3] = 0x10;  // header length += 256 MiB
  WriteBytes(dir / "model.safetensors", image);
  ExpectOpenError(dir, StatusCode::kInvalidArgument, {"model.safetensors", "header length"});
  image = TwoTensors();
  image.resize(40);
  WriteBytes(dir / "model.safetensors", image);
  ExpectOpenError(dir, StatusCode::kDataLoss, {"model.safetensors", "runs past the end"});
}

TEST(CheckpointErrorsTest, HeaderNotJson) {
  TempDir dir("err_json");
  WriteBytes(dir / "model.safetensors", Crafted("{\"w\": {\"dtype\": F32}}", 16));
  ExpectOpenError(dir, StatusCode::kInvalidArgument, {"model.safetensors", "not valid JSON"});
}

TEST(CheckpointErrorsTest, OverlappingOffsets) {
  TempDir dir("err_overlap");
  WriteBytes(dir / "model.safetensors",
             Crafted(R"({"x.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},
                         "y.weight":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}})",
                     28));
  ExpectOpenError(dir, StatusCode::kInvalidArgument,
                  {"model.safetensors", "'x.weight'", "'y.weight'", "overlap"});
}

TEST(CheckpointErrorsTest, OutOfRangeOffsets) {
  TempDir dir("err_range");
  WriteBytes(dir / "model.safetensors",
             Crafted(R"({"x.weight":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16));
  ExpectOpenError(dir, StatusCode::kDataLoss, {"model.safetensors", "'x.weight'", "[8, 24]"});
}

TEST(CheckpointErrorsTest, ByteLengthDisagreesWithDtypeAndShape) {
  TempDir dir("err_len");
  WriteBytes(dir / "model.safetensors",
             Crafted(R"({"x.weight":{"dtype":"BF16","shape":[2,4],"data_offsets":[0,32]}})", 32));
  ExpectOpenError(dir, StatusCode::kDataLoss,
                  {"model.safetensors", "'x.weight'", "BF16[2, 4] needs 16"});
}

TEST(CheckpointErrorsTest, UnknownDtype) {
  TempDir dir("err_dtype");
  WriteBytes(dir / "model.safetensors",
             Crafted(R"({"x.weight":{"dtype":"F12","shape":[2],"data_offsets":[0,3]}})", 3));
  ExpectOpenError(dir, StatusCode::kUnimplemented, {"model.safetensors", "'x.weight'", "'F12'"});
}

TEST(CheckpointErrorsTest, MissingTensorAndWrongShape) {
  TempDir dir("err_read");
  WriteBytes(dir / "model.safetensors", TwoTensors());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const auto missing = (*ckpt)->ReadF32("layers.0.attn.wkv.weight", Shape{4, 4});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'layers.0.attn.wkv.weight'"), std::string::npos);
  EXPECT_NE(missing.status().message().find(dir.path().string()), std::string::npos);

  const auto wrong = (*ckpt)->ReadF32("layers.0.attn.wq_a.weight", Shape{4, 8});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  for (const char* needle :
       {"model.safetensors", "'layers.0.attn.wq_a.weight'", "'model.layers.0.attn.wq_a.weight'",
        "has shape [4, 4], expected [4, 8]"})
    EXPECT_NE(wrong.status().message().find(needle), std::string::npos)
        << wrong.status().ToString();

  const auto as_int = (*ckpt)->ReadI64("layers.0.attn.wq_a.weight", Shape{4, 4});
  ASSERT_FALSE(as_int.ok());
  EXPECT_EQ(as_int.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(as_int.status().message().find("F32"), std::string::npos);
}

TEST(CheckpointErrorsTest, NonFloatAndBadScales) {
  TempDir dir("err_quant");
  WriteBytes(dir / "model.safetensors",
             SafetensorsBuilder()
                 .Add("ids", "I64", {2}, Bytes(std::vector<int64_t>{1, 2}))
                 .Add("raw.weight", "I8", {2, 16}, std::vector<uint8_t>(32, 0))
                 .Add("fp8.weight", "F8_E4M3", {130, 4}, std::vector<uint8_t>(520, 0))
                 .Add("fp8.scale", "F8_E8M0", {1, 1}, {127})
                 .Add("fp4.weight", "I8", {2, 16}, std::vector<uint8_t>(32, 0))
                 .Add("fp4.scale", "F8_E8M0", {2, 2}, std::vector<uint8_t>(4, 127))
                 .Build());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const auto ids = (*ckpt)->ReadF32("ids", Shape{2});
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("I64"), std::string::npos);
  const auto raw = (*ckpt)->ReadF32("raw.weight", Shape{2, 32});
  EXPECT_EQ(raw.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(raw.status().message().find("without a scale"), std::string::npos);
  const auto fp8 = (*ckpt)->ReadF32("fp8.weight", Shape{130, 4});
  EXPECT_EQ(fp8.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(fp8.status().message().find("needs F8_E8M0[2, 1]"), std::string::npos)
      << fp8.status().ToString();
  const auto fp4 = (*ckpt)->ReadF32("fp4.weight", Shape{2, 32});
  EXPECT_EQ(fp4.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(fp4.status().message().find("needs F8_E8M0[2, 1]"), std::string::npos)
      << fp4.status().ToString();
}

TEST(CheckpointErrorsTest, DuplicateNamesAcrossShards) {
  TempDir dir("err_dup");
  WriteBytes(dir / "a.safetensors", TwoTensors());
  WriteBytes(dir / "b.safetensors",
             SafetensorsBuilder().F32("model.layers.0.attn.wq_b.weight", {1}, {1}).Build());
  ExpectOpenError(dir, StatusCode::kInvalidArgument,
                  {"'model.layers.0.attn.wq_b.weight'", "a.safetensors", "b.safetensors"});
  // Two dialects of one tensor are a duplicate too.
  WriteBytes(dir / "b.safetensors",
             SafetensorsBuilder().F32("layers.0.attn.wq_b.weight", {1}, {1}).Build());
  ExpectOpenError(dir, StatusCode::kInvalidArgument,
                  {"'layers.0.attn.wq_b.weight'", "after name mapping"});
}

TEST(CheckpointErrorsTest, IndexProblems) {
  TempDir dir("err_index");
  WriteBytes(dir / "model-00001-of-00002.safetensors", TwoTensors());
  WriteBytes(dir / "model-00002-of-00002.safetensors",
             SafetensorsBuilder().F32("model.norm.weight", {4}, {1, 2, 3, 4}).Build());
  const auto index = dir / "model.safetensors.index.json";
  WriteText(index, R"({"metadata": {"total_size": 144}, "weight_map": {
      "model.layers.0.attn.wq_a.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.attn.wq_b.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})");
  auto ok = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->CanonicalNames().size(), 3u);

  WriteText(index, R"({"weight_map": {"model.norm.weight": "model-00003-of-00003.safetensors"}})");
  ExpectOpenError(
      dir, StatusCode::kNotFound,
      {"model.safetensors.index.json", "model-00003-of-00003.safetensors", "does not exist"});
  WriteText(index, R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  ExpectOpenError(dir, StatusCode::kNotFound,
                  {"model.safetensors.index.json", "'model.norm.weight'", "does not hold it"});
  WriteText(index,
            R"({"weight_map": {"model.norm.weight": "../model-00002-of-00002.safetensors"}})");
  ExpectOpenError(dir, StatusCode::kInvalidArgument,
                  {"model.safetensors.index.json", "not a file name"});
  WriteText(index, R"({"weight_map": [1, 2]})");
  ExpectOpenError(dir, StatusCode::kInvalidArgument,
                  {"model.safetensors.index.json", "weight_map"});
  WriteText(index, "{\"weight_map\": ");
  ExpectOpenError(dir, StatusCode::kInvalidArgument,
                  {"model.safetensors.index.json", "not valid JSON"});
}

TEST(CheckpointErrorsTest, UnknownModelTypeInConfig) {
  TempDir dir("err_config");
  WriteText(dir / "config.json", R"({"model_type": "deepseek_v3", "hidden_size": 7168})");
  const auto r = LoadModelConfig(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(r.status().message().find("unknown model_type 'deepseek_v3'"), std::string::npos);
}

}  // namespace
}  // namespace peregrine
