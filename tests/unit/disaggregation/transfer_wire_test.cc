#include "disaggregation/transfer_wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace peregrine::disaggregation {
namespace {

TransferredKv SomeKv() {
  TransferredKv kv;
  kv.fingerprint = "cpu-f32/test";
  kv.prompt_ids = {5, 6, 7};
  kv.num_tokens = 3;
  kv.num_cached_tokens = 2;
  kv.first.token = 9;
  kv.first.logprob = -0.25f;
  kv.first.top_logprobs = {{9, -0.25f}, {4, -1.5f}};
  kv.pages = {{1, 2, 3}, {4, 5}};
  return kv;
}

TEST(TransferWire, MetaRoundTripsUnderTheSecret) {
  const RoomMeta meta = MetaOf(SomeKv());
  const std::vector<uint8_t> bytes = EncodeMeta(meta, "s3cret", 42);
  Result<RoomMeta> back = DecodeMeta(bytes, "s3cret", 42);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->fingerprint, "cpu-f32/test");
  EXPECT_EQ(back->prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(back->num_tokens, 3);
  EXPECT_EQ(back->num_cached_tokens, 2);
  EXPECT_EQ(back->first.token, 9);
  EXPECT_FLOAT_EQ(back->first.logprob, -0.25f);
  ASSERT_EQ(back->first.top_logprobs.size(), 2u);
  EXPECT_EQ(back->first.top_logprobs[1].token, 4);
  EXPECT_EQ(back->page_sizes, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(back->page_digests[0], Sha256(std::vector<uint8_t>{1, 2, 3}));
}

TEST(TransferWire, MetaRefusedUnderAnotherSecretOrRoomOrWhenTampered) {
  const std::vector<uint8_t> bytes = EncodeMeta(MetaOf(SomeKv()), "s3cret", 42);
  EXPECT_FALSE(DecodeMeta(bytes, "other", 42).ok());
  EXPECT_FALSE(DecodeMeta(bytes, "s3cret", 43).ok());
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::vector<uint8_t> t = bytes;
    t[i] ^= 0x01;
    EXPECT_FALSE(DecodeMeta(t, "s3cret", 42).ok()) << "byte " << i;
  }
  EXPECT_FALSE(DecodeMeta(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 10), "s3cret", 42).ok());
  EXPECT_FALSE(DecodeMeta(std::vector<uint8_t>{0xff, 0x00, 0x13}, "s3cret", 42).ok());
}

TEST(TransferWire, HostileCborIsRefusedNotThrown) {
  // An array declaring 2^62 entries, and arrays nested 100,000 deep: refused before any DOM.
  std::vector<uint8_t> huge = {0x9b, 0x40, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_FALSE(DecodeMeta(huge, "s3cret", 1).ok());
  std::vector<uint8_t> deep(100000, 0x81);
  EXPECT_FALSE(DecodeMeta(deep, "s3cret", 1).ok());
  EXPECT_FALSE(DecodeMeta(std::vector<uint8_t>{0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "s3cret", 1).ok());
}

TEST(TransferWire, HeaderChecksMagicVersionKindAndSize) {
  WireHeader h;
  h.kind = static_cast<uint16_t>(MessageKind::kPage);
  h.room = 7;
  h.index = 3;
  std::vector<uint8_t> b(sizeof h);
  std::memcpy(b.data(), &h, sizeof h);
  Result<WireHeader> ok = ParseHeader(b);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->room, 7u);
  EXPECT_EQ(ok->index, 3u);
  std::vector<uint8_t> bad = b;
  bad[0] ^= 1;
  EXPECT_FALSE(ParseHeader(bad).ok());
  bad = b;
  bad[4] = 9;  // version
  EXPECT_FALSE(ParseHeader(bad).ok());
  bad = b;
  bad[6] = 77;  // kind
  EXPECT_FALSE(ParseHeader(bad).ok());
  EXPECT_FALSE(ParseHeader(std::vector<uint8_t>(b.begin(), b.end() - 1)).ok());
}

TEST(TransferWire, PullMacDependsOnSecretAndRoom) {
  EXPECT_NE(PullMac("a", 1), PullMac("b", 1));
  EXPECT_NE(PullMac("a", 1), PullMac("a", 2));
  const Digest d = PullMac("a", 1);
  EXPECT_TRUE(DigestEquals(d, d));
  EXPECT_FALSE(DigestEquals(d, std::span<const uint8_t>(d.data(), 31)));
  // A release cannot be made from a pull's MAC.
  EXPECT_NE(ReleaseMac("a", 1), PullMac("a", 1));
  EXPECT_NE(ReleaseMac("a", 1), ReleaseMac("a", 2));
}

RoomMeta DeviceMeta() {
  TransferredKv kv = SomeKv();
  kv.pages.clear();
  auto pages = std::make_shared<DeviceKvPages>();
  pages->ipc_handle.assign(64, 7);
  pages->host = "boot-id";
  pages->arena_bytes = 1000;
  pages->offsets = {0, 512};
  pages->sizes = {512, 488};
  pages->checksums = {0xdeadbeefcafef00dull, 3};
  kv.device = pages;
  return MetaOf(kv);
}

TEST(TransferWire, DeviceMetaRoundTripsWithoutDigests) {
  const RoomMeta meta = DeviceMeta();
  EXPECT_TRUE(meta.page_digests.empty());
  Result<RoomMeta> back = DecodeMeta(EncodeMeta(meta, "s3cret", 5), "s3cret", 5);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->device);
  EXPECT_EQ(back->ipc_handle, std::vector<uint8_t>(64, 7));
  EXPECT_EQ(back->ipc_host, "boot-id");
  EXPECT_EQ(back->arena_bytes, 1000u);
  EXPECT_EQ(back->page_sizes, (std::vector<uint64_t>{512, 488}));
  EXPECT_EQ(back->page_offsets, (std::vector<uint64_t>{0, 512}));
  EXPECT_EQ(back->page_checksums, (std::vector<uint64_t>{0xdeadbeefcafef00dull, 3}));
  // A host meta says it is not one.
  Result<RoomMeta> host = DecodeMeta(EncodeMeta(MetaOf(SomeKv()), "s3cret", 5), "s3cret", 5);
  ASSERT_TRUE(host.ok());
  EXPECT_FALSE(host->device);
}

TEST(TransferWire, InconsistentDeviceMetaIsRefused) {
  auto refused = [](RoomMeta m) { return !DecodeMeta(EncodeMeta(m, "s", 1), "s", 1).ok(); };
  RoomMeta m = DeviceMeta();
  m.page_offsets[1] = 600;  // 600 + 488 > 1000
  EXPECT_TRUE(refused(m));
  m = DeviceMeta();
  m.page_offsets.pop_back();
  EXPECT_TRUE(refused(m));
  m = DeviceMeta();
  m.page_checksums.push_back(1);
  EXPECT_TRUE(refused(m));
  m = DeviceMeta();
  m.ipc_handle.resize(63);
  EXPECT_TRUE(refused(m));
  m = DeviceMeta();
  m.page_digests.resize(2);  // digests too: not one kind of page or the other
  EXPECT_TRUE(refused(m));
  m = DeviceMeta();
  m.page_offsets[0] = ~uint64_t{0};  // no wrap-around
  EXPECT_TRUE(refused(m));
  EXPECT_FALSE(refused(DeviceMeta()));
}

}  // namespace
}  // namespace peregrine::disaggregation
