// The KV transfer over UCX on loopback: a real sender and receiver in one process.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"
#include "transfer_test_util.h"

namespace peregrine::disaggregation {
namespace {

TEST(KvTransfer, PagesArriveWholeAndChecked) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  // Small pages go eagerly; 4 MiB ones by rendezvous.
  const TransferredKv kv = MakeKv(6, 4u << 20, 1);
  sender->Publish(7, kv);
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 7);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->fingerprint, kv.fingerprint);
  EXPECT_EQ(got->prompt_ids, kv.prompt_ids);
  EXPECT_EQ(got->num_tokens, 4);
  EXPECT_EQ(got->first.token, 99);
  ASSERT_EQ(got->pages.size(), kv.pages.size());
  for (size_t i = 0; i < kv.pages.size(); ++i) EXPECT_EQ(got->pages[i], kv.pages[i]) << "page " << i;
  EXPECT_EQ(sender->stats().rooms_sent, 1);
  EXPECT_EQ(receiver->stats().pulls_done, 1);
  // A room is pulled once.
  const TransferredKv small = MakeKv(2, 100, 2);
  sender->Publish(8, small);
  ASSERT_TRUE(PullNow(*receiver, sender->port(), 8).ok());
}

TEST(KvTransfer, APullBeforeThePublishWaitsForIt) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  std::promise<Result<TransferredKv>> p;
  receiver->Pull("127.0.0.1", sender->port(), 5, [&](Result<TransferredKv> kv) { p.set_value(std::move(kv)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sender->Publish(5, MakeKv(3, 1000, 3));
  Result<TransferredKv> got = p.get_future().get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->pages.size(), 3u);
}

TEST(KvTransfer, ManyRoomsAtOnce) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  constexpr int kRooms = 16;
  std::vector<std::promise<Result<TransferredKv>>> done(kRooms);
  for (int i = 0; i < kRooms; ++i)
    receiver->Pull("127.0.0.1", sender->port(), 100 + i,
                   [&done, i](Result<TransferredKv> kv) { done[static_cast<size_t>(i)].set_value(std::move(kv)); });
  for (int i = kRooms - 1; i >= 0; --i) sender->Publish(100 + i, MakeKv(2, 5000, static_cast<uint32_t>(i)));
  for (int i = 0; i < kRooms; ++i) {
    Result<TransferredKv> got = done[static_cast<size_t>(i)].get_future().get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->pages, MakeKv(2, 5000, static_cast<uint32_t>(i)).pages);
  }
}

TEST(KvTransfer, ARequestWithoutKvReachesThePullerAsItsReason) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  sender->Publish(9, Unavailable("the request was aborted"));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 9);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("the request was aborted"), std::string::npos);
}

TEST(KvTransfer, ACorruptedPageIsRefused) {
  auto sender = StartSender("k", 30.0, "corrupt");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  sender->Publish(3, MakeKv(3, 2u << 20, 4));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 3);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
}

TEST(KvTransfer, AnotherSecretGetsNothing) {
  auto sender = StartSender("right");
  auto receiver = StartReceiver("wrong", 1.0);
  ASSERT_TRUE(sender && receiver);
  sender->Publish(1, MakeKv(2, 100, 5));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sender->stats().pulls_refused, 1);
  EXPECT_EQ(sender->stats().rooms_sent, 0);
}

TEST(KvTransfer, ARoomExpiresAndALatePullHearsSo) {
  auto sender = StartSender("k", 0.2);
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  sender->Publish(4, MakeKv(2, 100, 6));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 4);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("expired"), std::string::npos) << got.status().ToString();
  EXPECT_EQ(sender->stats().rooms_expired, 1);
}

TEST(KvTransfer, ARoomNeverPublishedTimesOut) {
  auto sender = StartSender("k", 30.0, "drop");
  auto receiver = StartReceiver("k", 0.5);
  ASSERT_TRUE(sender && receiver);
  sender->Publish(6, MakeKv(1, 10, 7));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 6);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(KvTransfer, APublishAfterThePullGaveUpIsIgnored) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k", 0.3);
  ASSERT_TRUE(sender && receiver);
  std::atomic<int> calls{0};
  std::promise<Result<TransferredKv>> first;
  receiver->Pull("127.0.0.1", sender->port(), 11, [&](Result<TransferredKv> kv) {
    if (calls.fetch_add(1) == 0) first.set_value(std::move(kv));
  });
  Result<TransferredKv> got = first.get_future().get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  // The room arrives late: the ended pull closed its connection, so the sender has no one to
  // send it to (it waits for its expiry); `done` is not called again and the receiver keeps
  // working.
  sender->Publish(11, MakeKv(4, 1u << 20, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(calls.load(), 1);
  sender->Publish(12, MakeKv(2, 100, 11));
  EXPECT_TRUE(PullNow(*receiver, sender->port(), 12).ok());
}

TEST(KvTransfer, PastTheByteCapTheOldestRoomsAreDropped) {
  auto sender = StartSender("k", 30.0, {}, 5u << 20);
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  sender->Publish(21, MakeKv(2, 1u << 20, 12));  // ~2 MiB each
  sender->Publish(22, MakeKv(2, 1u << 20, 13));
  sender->Publish(23, MakeKv(2, 1u << 20, 14));  // over 5 MiB: room 21 goes
  Result<TransferredKv> dropped = PullNow(*receiver, sender->port(), 21);
  ASSERT_FALSE(dropped.ok());
  EXPECT_NE(dropped.status().message().find("too much KV"), std::string::npos) << dropped.status().ToString();
  EXPECT_TRUE(PullNow(*receiver, sender->port(), 22).ok());
  EXPECT_TRUE(PullNow(*receiver, sender->port(), 23).ok());
  EXPECT_EQ(sender->stats().rooms_dropped, 1);
}

TEST(KvTransfer, NobodyListeningFailsThePull) {
  uint16_t port = 0;
  {
    auto sender = StartSender("k");
    ASSERT_TRUE(sender);
    port = sender->port();
  }
  auto receiver = StartReceiver("k", 5.0);
  ASSERT_TRUE(receiver);
  Result<TransferredKv> got = PullNow(*receiver, port, 1);
  EXPECT_FALSE(got.ok());
}

TEST(KvTransfer, GarbageOnThePortDoesNotStopTheSender) {
  auto sender = StartSender("k");
  auto receiver = StartReceiver("k");
  ASSERT_TRUE(sender && receiver);
  std::mt19937 rng(8);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(sender->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::vector<uint8_t> junk(attempt == 0 ? 3 : 4096);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
    EXPECT_GT(write(fd, junk.data(), junk.size()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    close(fd);
  }
  sender->Publish(2, MakeKv(2, 1000, 9));
  Result<TransferredKv> got = PullNow(*receiver, sender->port(), 2);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

}  // namespace
}  // namespace peregrine::disaggregation
