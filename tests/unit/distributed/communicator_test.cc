#include "distributed/communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "distributed/nccl_communicator.h"
#include "distributed/tcp_store.h"
#include "rank_processes.h"

namespace peregrine::distributed {
namespace {

using testing::FreeLoopbackPort;
using testing::RunRanks;

Rendezvous At(int port, int rank, int size, int timeout_ms = 20000) {
  Rendezvous r;
  r.port = port;
  r.rank = rank;
  r.size = size;
  r.timeout = std::chrono::milliseconds(timeout_ms);
  return r;
}

#if PEREGRINE_HAVE_GLOO

// Every collective over `size` ranks; each rank checks what it got and exits non-zero on a
// wrong value (the code names the check).
int Collectives(int rank, int size, int port) {
  auto comm = CreateGlooCommunicator(At(port, rank, size));
  if (!comm.ok()) return 10;
  Communicator& c = **comm;
  if (c.rank() != rank || c.size() != size) return 11;
  // All-reduce: 1000 values, a non-power-of-two count so the ring's chunks are uneven.
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i);
  if (!c.AllReduceSum(v.data(), static_cast<int64_t>(v.size()), DType::kF32).ok()) return 12;
  const float ranks_sum = 0.5f * static_cast<float>(size * (size + 1) / 2);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != ranks_sum + static_cast<float>(size) * static_cast<float>(i)) return 13;
  // The same bits on every rank: gather them and compare.
  std::vector<float> all(v.size() * static_cast<size_t>(size));
  if (!c.AllGather(v.data(), all.data(), static_cast<int64_t>(v.size()), DType::kF32).ok()) return 14;
  for (int r = 0; r < size; ++r)
    if (std::memcmp(all.data() + v.size() * static_cast<size_t>(r), v.data(), v.size() * sizeof(float)) != 0)
      return 15;
  // All-gather of bytes: row r is rank r's.
  std::vector<uint8_t> mine(3, static_cast<uint8_t>(rank + 7)), rows(3 * static_cast<size_t>(size));
  if (!c.AllGather(mine.data(), rows.data(), 3, DType::kU8).ok()) return 16;
  for (int r = 0; r < size; ++r)
    for (int k = 0; k < 3; ++k)
      if (rows[static_cast<size_t>(r * 3 + k)] != r + 7) return 17;
  // Reduce-scatter: in[j][k] = rank * 10 + j; this rank's row of the sum is sum_r(r*10) + size*rank.
  std::vector<float> in(static_cast<size_t>(size) * 4), out(4);
  for (int j = 0; j < size; ++j)
    for (int k = 0; k < 4; ++k) in[static_cast<size_t>(j * 4 + k)] = static_cast<float>(rank * 10 + j);
  if (!c.ReduceScatterSum(in.data(), out.data(), 4, DType::kF32).ok()) return 18;
  for (float x : out)
    if (x != static_cast<float>(10 * size * (size - 1) / 2 + size * rank)) return 19;
  // All-to-all: row j of rank r holds r * 100 + j; afterwards row j came from rank j.
  std::vector<int32_t> send(static_cast<size_t>(size) * 2), recv(send.size());
  for (int j = 0; j < size; ++j) send[static_cast<size_t>(2 * j)] = send[static_cast<size_t>(2 * j + 1)] = rank * 100 + j;
  if (!c.AllToAll(send.data(), recv.data(), 2, DType::kI32).ok()) return 20;
  for (int j = 0; j < size; ++j)
    if (recv[static_cast<size_t>(2 * j)] != j * 100 + rank || recv[static_cast<size_t>(2 * j + 1)] != j * 100 + rank)
      return 21;
  // Broadcast from the last rank.
  std::vector<int64_t> b(5, rank == size - 1 ? 42 : -1);
  if (!c.Broadcast(b.data(), 5, DType::kI64, size - 1).ok()) return 22;
  for (int64_t x : b)
    if (x != 42) return 23;
  // Point to point around the ring, two messages in order.
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (size > 1) {
    for (int m = 0; m < 2; ++m) {
      int32_t out_msg = rank * 10 + m, in_msg = -1;
      if (rank % 2 == 0) {
        if (!c.Send(&out_msg, 1, DType::kI32, next).ok() || !c.Recv(&in_msg, 1, DType::kI32, prev).ok()) return 24;
      } else {
        if (!c.Recv(&in_msg, 1, DType::kI32, prev).ok() || !c.Send(&out_msg, 1, DType::kI32, next).ok()) return 24;
      }
      if (in_msg != prev * 10 + m) return 25;
    }
  }
  if (!c.Barrier().ok()) return 26;
  // Refused before anything is sent.
  float f = 0;
  if (c.Broadcast(&f, 1, DType::kF32, size).code() != StatusCode::kInvalidArgument) return 27;
  if (c.AllReduceSum(&f, 1, DType::kBF16).ok()) return 28;
  if (c.AllGather(&f, &f, 1, DType::kE2M1).ok()) return 29;
  return 0;
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, EveryCollectiveGivesEveryRankTheRightValues) {
  const int size = GetParam();
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(size, [&](int rank) { return Collectives(rank, size, port); });
  for (int r = 0; r < size; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooCollectivesTest, ::testing::Values(1, 2, 3, 4));

TEST(GlooCommunicatorTest, ARankThatDiesFailsTheOthersCollectivesInsteadOfHangingThem) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(3, [&](int rank) {
    auto comm = CreateGlooCommunicator(At(port, rank, 3, 8000));
    if (!comm.ok()) return 10;
    float x = 1.0f;
    if (!(*comm)->AllReduceSum(&x, 1, DType::kF32).ok() || x != 3.0f) return 11;
    if (rank == 2) ::_exit(0);  // dies without a word
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> v(4096, 1.0f);
    const Status s = (*comm)->AllReduceSum(v.data(), 4096, DType::kF32);
    if (s.ok()) return 12;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) return 13;
    // The group stays failed.
    if ((*comm)->Barrier().ok()) return 14;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(GlooCommunicatorTest, ARankThatNeverJoinsFailsTheGroupAfterTheTimeout) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(2, [&](int rank) {
    if (rank == 1) return 0;  // never joins
    const auto start = std::chrono::steady_clock::now();
    auto comm = CreateGlooCommunicator(At(port, 0, 2, 1500));
    if (comm.ok()) return 10;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) return 11;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

#else

TEST(GlooCommunicatorTest, BuildsWithoutGlooSayWhy) {
  auto comm = CreateGlooCommunicator(At(0, 0, 1));
  EXPECT_EQ(comm.status().code(), StatusCode::kUnimplemented);
}

#endif

TEST(TcpStoreTest, AGetWaitsForTheSetAndTimesOutWithoutOne) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();
  auto a = TcpStore::Connect("127.0.0.1", port, std::chrono::milliseconds(3000));
  auto b = TcpStore::Connect("127.0.0.1", port, std::chrono::milliseconds(300));
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE((*b)->Set("k", {'v', '1'}).ok());
  });
  auto got = (*a)->Get("k");
  later.join();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, (std::vector<char>{'v', '1'}));
  auto missing = (*b)->Get("never");
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  // A connection whose call failed is not reused.
  EXPECT_FALSE((*b)->Set("x", {}).ok());
}

TEST(TcpStoreTest, NoServerMeansUnavailableAfterTheTimeout) {
  const int port = FreeLoopbackPort();
  auto s = TcpStore::Connect("127.0.0.1", port, std::chrono::milliseconds(200));
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(TcpStoreServer::Start("not-an-ip", 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParallelConfigTest, ShardsCoverTheDimensionOnce) {
  for (int size : {1, 2, 3, 4, 8}) {
    int64_t covered = 0;
    for (int r = 0; r < size; ++r) {
      const ShardRange s = PaddedShard(1001, r, size);
      EXPECT_EQ(s.begin, covered);
      covered = s.end;
    }
    EXPECT_EQ(covered, 1001);
    if (64 % size == 0) {
      EXPECT_EQ(EvenShard(64, size - 1, size).end, 64);
    }
  }
  EXPECT_EQ(PaddedShard(3, 3, 4).size(), 0);
}

TEST(ParallelConfigTest, FlagsAreCheckedTogether) {
  ParallelConfig c;
  EXPECT_TRUE(ValidateParallelConfig(c).ok());
  c.tp_size = 0;
  EXPECT_FALSE(ValidateParallelConfig(c).ok());
  c.tp_size = 4;
  c.nnodes = 3;
  EXPECT_FALSE(ValidateParallelConfig(c).ok());
  c.nnodes = 2;
  EXPECT_FALSE(ValidateParallelConfig(c).ok()) << "several nodes need an address";
  c.dist_init_addr = "10.0.0.1:5000";
  EXPECT_TRUE(ValidateParallelConfig(c).ok());
  c.node_rank = 2;
  EXPECT_FALSE(ValidateParallelConfig(c).ok());
  c.node_rank = 1;
  for (const char* bad : {"10.0.0.1", ":5000", "host:", "host:0", "host:70000", "host:5x"}) {
    c.dist_init_addr = bad;
    EXPECT_FALSE(ValidateParallelConfig(c).ok()) << bad;
  }
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("[::1]:29500", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 29500);
}

TEST(NcclCommunicatorTest, AMissingLibraryIsNamedInTheError) {
  NcclOptions o;
  o.library = "libnccl-that-does-not-exist.so";
  auto comm = CreateNcclCommunicator(At(0, 0, 1), o);
  ASSERT_FALSE(comm.ok());
#if PEREGRINE_HAVE_NCCL
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(comm.status().message().find("libnccl-that-does-not-exist.so"), std::string::npos);
#else
  EXPECT_EQ(comm.status().code(), StatusCode::kUnimplemented);
#endif
}

}  // namespace
}  // namespace peregrine::distributed
