// Header parser on in-memory images: one valid layout, then every way a header can lie.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <string>

#include "safetensors_writer.h"

namespace peregrine {
namespace {

using testing::RawSafetensors;
using testing::SafetensorsBuilder;

Result<SafetensorsHeader> Parse(const std::vector<uint8_t>& image) {
  return ParseSafetensors(image, "shard.safetensors");
}

// Expects failure with `code` and a message naming the file and containing `needle`.
void ExpectError(const std::vector<uint8_t>& image, StatusCode code, const std::string& needle) {
  const auto r = Parse(image);
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find("shard.safetensors"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

std::vector<uint8_t> WithHeader(const std::string& header, size_t data_bytes = 64) {
  return RawSafetensors(header, std::vector<uint8_t>(data_bytes, 0));
}

TEST(SafetensorsTest, ParsesValidFile) {
  const auto image = SafetensorsBuilder()
                         .Metadata({{"format", "pt"}})
                         .F32("a", {2, 3}, {1, 2, 3, 4, 5, 6})
                         .Add("b", "BF16", {4}, std::vector<uint8_t>(8, 0))
                         .Add("packed", "F4", {3, 3}, std::vector<uint8_t>(5, 0))
                         .Add("empty", "I64", {0, 7}, {})
                         .Build();
  const auto r = Parse(image);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->entries.size(), 4u);
  EXPECT_EQ(r->data_offset % 8, 0u);
  const SafetensorsEntry* a = nullptr;
  const SafetensorsEntry* packed = nullptr;
  for (const auto& e : r->entries) {
    if (e.name == "a") a = &e;
    if (e.name == "packed") packed = &e;
  }
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (Shape{2, 3}));
  EXPECT_EQ(a->offset, r->data_offset);
  EXPECT_EQ(a->num_bytes, 24u);
  float first = 0;
  std::memcpy(&first, image.data() + a->offset, 4);
  EXPECT_EQ(first, 1.0f);
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(packed->dtype, DType::kE2M1);
  EXPECT_EQ(packed->num_bytes, 5u);  // 9 fp4 values, two per byte
}

TEST(SafetensorsTest, TruncatedAndOversizedHeaders) {
  ExpectError({}, StatusCode::kDataLoss, "too short");
  ExpectError({1, 0, 0}, StatusCode::kDataLoss, "too short");
  // Header length larger than the file.
  auto image = WithHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  image.resize(image.size() - 20);
  ExpectError(image, StatusCode::kDataLoss, "runs past the end");
  // Over the 100 MB cap: refused before anything is read.
  std::vector<uint8_t> huge = {0x00, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'};  // 100000000
  ExpectError(huge, StatusCode::kDataLoss, "runs past the end");
  huge[0] = 0x01;  // 100000001
  ExpectError(huge, StatusCode::kInvalidArgument, "limit");
  huge = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ExpectError(huge, StatusCode::kInvalidArgument, "limit");
}

TEST(SafetensorsTest, HeaderNotJson) {
  ExpectError(WithHeader("not json"), StatusCode::kInvalidArgument, "not valid JSON");
  ExpectError(WithHeader(R"({"a":{"dtype":"F32",)"), StatusCode::kInvalidArgument,
              "not valid JSON");
  ExpectError(WithHeader("[1,2,3]"), StatusCode::kInvalidArgument, "not a JSON object");
  ExpectError(WithHeader(std::string("{\"\xff\":1}")), StatusCode::kInvalidArgument,
              "not valid JSON");
  ExpectError(WithHeader(R"({"a": 3})"), StatusCode::kInvalidArgument, "'a' is not a JSON object");
}

TEST(SafetensorsTest, MalformedEntries) {
  const auto inv = StatusCode::kInvalidArgument;
  ExpectError(WithHeader(R"({"w":{"shape":[1],"data_offsets":[0,4]}})"), inv, "'w' has no string");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})"), inv, "'shape'");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})"), inv,
              "data_offsets");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"), inv,
              "'w' has a shape entry");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})"), inv,
              "shape");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,4]}})"), inv,
              "data_offsets");
  ExpectError(
      WithHeader(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})"),
      inv, "overflows");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})"),
              StatusCode::kUnimplemented, "7 dimensions");
}

TEST(SafetensorsTest, UnknownDtype) {
  ExpectError(WithHeader(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})"),
              StatusCode::kUnimplemented, "'w' has unknown or unsupported dtype 'Q7'");
  ExpectError(WithHeader(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})"),
              StatusCode::kUnimplemented, "'F64'");
}

TEST(SafetensorsTest, OffsetsOutOfRange) {
  const auto loss = StatusCode::kDataLoss;
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[64,68]}})", 64), loss,
              "'w' has data_offsets [64, 68] outside the 64-byte data area");
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})"), loss,
              "outside");
  ExpectError(
      WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})"),
      loss, "outside");
}

TEST(SafetensorsTest, ByteLengthDisagreesWithShape) {
  const auto loss = StatusCode::kDataLoss;
  ExpectError(WithHeader(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})"), loss,
              "'w' has 20 bytes of data but F32[2, 3] needs 24");
  ExpectError(WithHeader(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})"), loss,
              "needs 8");
  ExpectError(WithHeader(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})"), loss,
              "needs 2");
}

TEST(SafetensorsTest, OverlapsAndDuplicates) {
  ExpectError(WithHeader(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},
                             "b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
              StatusCode::kInvalidArgument, "tensors 'a' and 'b' overlap");
  ExpectError(WithHeader(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},
                             "b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})"),
              StatusCode::kInvalidArgument, "overlap");
  ExpectError(WithHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                             "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
              StatusCode::kInvalidArgument, "tensor 'a' appears twice");
  // Same key nested deeper is not a duplicate tensor; empty tensors may share an offset.
  const auto ok = Parse(WithHeader(R"({"__metadata__":{"a":"x"},
      "a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
      "e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},
      "f":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})"));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(SafetensorsTest, LongNamesAreShortenedInMessages) {
  const std::string name(5000, 'x');
  const auto r =
      Parse(WithHeader(R"({")" + name + R"(":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})"));
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 400u);
}

}  // namespace
}  // namespace peregrine
