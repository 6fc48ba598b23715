// KV pages left in device memory (CUDA IPC): the transfer carries where they are, not their
// bytes, and the prefill side keeps them until the decode side releases them (or they expire).
// The pages here are stand-ins (no device is needed): what is checked is the protocol.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"
#include "transfer_test_util.h"

namespace peregrine::disaggregation {
namespace {

// A device room whose "pages" record when the last reference to them goes.
TransferredKv DeviceRoom(std::shared_ptr<std::atomic<bool>> freed) {
  TransferredKv kv = MakeKv(0, 0, 1);
  auto pages = std::make_unique<DeviceKvPages>();
  pages->ipc_handle.assign(64, 0xab);
  pages->host = "host-id";
  pages->arena_bytes = 1 << 20;
  pages->offsets = {0, 4096, 12288};
  pages->sizes = {4096, 8192, 256};
  pages->checksums = {11, 22, 33};
  kv.device = std::shared_ptr<const DeviceKvPages>(pages.release(), [freed](const DeviceKvPages* p) {
    freed->store(true);
    delete p;
  });
  return kv;
}

// Whether `done()` holds within `seconds` (the sender's thread counts after it has sent).
template <typename Done>
bool WaitUntil(Done done, double seconds = 5.0) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

bool WaitFor(const std::atomic<bool>& flag, double seconds) {
  return WaitUntil([&flag] { return flag.load(); }, seconds);
}

TEST(DeviceKvPages, AreNamedNotSentAndFreedOnceTheDecodeSideReleasesThem) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  auto freed = std::make_shared<std::atomic<bool>>(false);
  sender->Publish(31, DeviceRoom(freed));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 31);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_NE(got->device, nullptr);
  EXPECT_TRUE(got->pages.empty());
  EXPECT_EQ(got->num_pages(), 3u);
  EXPECT_EQ(got->device->ipc_handle, std::vector<uint8_t>(64, 0xab));
  EXPECT_EQ(got->device->host, "host-id");
  EXPECT_EQ(got->device->arena_bytes, uint64_t{1} << 20);
  EXPECT_EQ(got->device->offsets, (std::vector<uint64_t>{0, 4096, 12288}));
  EXPECT_EQ(got->device->sizes, (std::vector<uint64_t>{4096, 8192, 256}));
  EXPECT_EQ(got->device->checksums, (std::vector<uint64_t>{11, 22, 33}));
  EXPECT_EQ(got->prompt_ids, (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_TRUE(WaitUntil([&] { return sender->stats().bytes_sent == 4096 + 8192 + 256; }));
  EXPECT_EQ(receiver->stats().bytes_received, 4096 + 8192 + 256);
  // Pulled but not copied yet: the prefill side still holds them, and the room id is not
  // taken again meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(freed->load());
  sender->Publish(31, DeviceRoom(std::make_shared<std::atomic<bool>>(false)));
  Result<TransferredKv> again = PullNow(*receiver, sender->port(), 31);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("still in use"), std::string::npos) << again.status().ToString();
  got = Unavailable("copied");  // the decode engine is done with them
  EXPECT_TRUE(WaitFor(*freed, 5.0));
  EXPECT_TRUE(WaitUntil([&] { return sender->stats().rooms_released == 1; }));
  // The receiver goes on working.
  sender->Publish(32, MakeKv(2, 100, 2));
  EXPECT_TRUE(PullNow(*receiver, sender->port(), 32).ok());
}

TEST(DeviceKvPages, ThatAreNeverReleasedAreFreedWhenTheyExpire) {
  auto sender = StartSender("k", 0.3);
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  auto freed = std::make_shared<std::atomic<bool>>(false);
  sender->Publish(33, DeviceRoom(freed));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 33);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(WaitFor(*freed, 8.0));  // `got` still holds them: the decode side hung
  EXPECT_EQ(sender->stats().rooms_released, 0);
  // A room nobody pulls frees its pages too.
  auto unpulled = std::make_shared<std::atomic<bool>>(false);
  sender->Publish(34, DeviceRoom(unpulled));
  EXPECT_TRUE(WaitFor(*unpulled, 5.0));
}

TEST(DeviceKvPages, TheCorruptFaultBreaksAChecksumForTheRunnerToRefuse) {
  auto sender = StartSender("k", 30.0, "corrupt");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  sender->Publish(35, DeviceRoom(std::make_shared<std::atomic<bool>>(false)));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 35);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->device->checksums, (std::vector<uint64_t>{11, 22, 33 ^ 1}));
}

TEST(DeviceKvPages, OutliveTheReceiverWithoutHarm) {
  auto sender = StartSender("k", 0.2);
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  auto freed = std::make_shared<std::atomic<bool>>(false);
  sender->Publish(36, DeviceRoom(freed));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 36);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  receiver.reset();
  got = Unavailable("dropped after the receiver stopped");  // no release can be sent: they expire
  EXPECT_TRUE(WaitFor(*freed, 5.0));
}

TEST(DeviceKvPages, ARestartedSenderBindsItsPortAtOnce) {
  // The connections of pulled device rooms stay open until their release, so a sender that
  // stops first closes them itself and leaves its port in TIME_WAIT; a restarted prefill
  // server must still bind it.
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(receiver);
  auto first = StartSender("k");
  ASSERT_TRUE(first);
  const uint16_t port = first->port();
  std::vector<Result<TransferredKv>> held;
  for (uint64_t room = 1; room <= 3; ++room) {
    first->Publish(room, DeviceRoom(std::make_shared<std::atomic<bool>>(false)));
    held.push_back(PullNow(*receiver, port, room));
    ASSERT_TRUE(held.back().ok()) << held.back().status().ToString();
  }
  first.reset();
  KvSenderConfig c;
  c.port = port;
  c.secret = "k";
  Result<std::unique_ptr<KvSender>> again = KvSender::Start(c);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  (*again)->Publish(9, MakeKv(1, 64, 9));
  EXPECT_TRUE(PullNow(*receiver, port, 9).ok());
}

}  // namespace
}  // namespace peregrine::disaggregation
