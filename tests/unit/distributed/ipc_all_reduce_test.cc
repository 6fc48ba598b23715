// The custom all-reduce between processes on one GPU (CUDA IPC maps each process's buffers
// into the other, as between the GPUs of a host): sums bit for bit equal to the f32 sum in
// rank order, in and out of a captured graph; the Communicator around it routes what it takes
// and passes the rest to the group; a peer that never calls fails the caller's stream within
// the timeout instead of hanging it. The ranks are processes (fork, before anything here
// touches CUDA) that exchange handles through the rendezvous store. On one GPU the processes'
// kernels share it by time slices: a kernel waiting for a peer holds the GPU until its slice
// ends, and host calls of the other process that need the GPU (allocation, graph set-up) wait
// behind it; so the ranks meet on the host (the store) before each sum, where the ranks of a
// real group (one GPU each) would not need to. Label gpu.
#include "distributed/ipc_all_reduce.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/tcp_store.h"
#include "rank_processes.h"

namespace peregrine::distributed {
namespace {

using testing::FreeLoopbackPort;
using testing::RunRanks;

// Whether a child process sees a GPU (the test process itself must not initialise CUDA
// before it forks the ranks).
bool ChildSeesGpu() {
  return RunRanks(1, [](int) {
           int n = 0;
           return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1;
         })[0] == 0;
}

// The handle exchange of rank `rank` over the rendezvous store (rank 0 serves it).
struct StoreExchange {
  std::shared_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> store;
  int rank = 0, size = 0, round = 0;

  static std::unique_ptr<StoreExchange> Join(int port, int rank, int size) {
    auto x = std::make_unique<StoreExchange>();
    x->rank = rank;
    x->size = size;
    if (rank == 0) {
      auto s = TcpStoreServer::Start("127.0.0.1", port);
      if (!s.ok()) return nullptr;
      x->server = std::move(s).value();
    }
    auto c = TcpStore::Connect("127.0.0.1", port, std::chrono::seconds(20));
    if (!c.ok()) return nullptr;
    x->store = std::move(c).value();
    return x;
  }
  Result<std::vector<std::vector<char>>> operator()(const std::vector<char>& mine) {
    std::string prefix = "x";  // successive += (GCC 12 warns on a + chain here)
    prefix += std::to_string(round++);
    prefix += '/';
    PG_RETURN_IF_ERROR(store->Set(prefix + std::to_string(rank), mine));
    std::vector<std::vector<char>> all;
    for (int r = 0; r < size; ++r) {
      PG_ASSIGN_OR_RETURN(std::vector<char> v, store->Get(prefix + std::to_string(r)));
      all.push_back(std::move(v));
    }
    return all;
  }
  // Every rank waits for all to get here.
  bool Barrier() { return (*this)({'1'}).ok(); }
  // Before any goes: a rank's memory must outlive the peers' last reads of it, and rank 0
  // serves the store.
  void Finish() { (void)Barrier(); }
};

// Rank r's input: small integers times powers of two, so sums are exact in f32 but bf16
// rounding of the result still matters.
float Input(int rank, int64_t j) {
  return static_cast<float>(((j * 7 + rank * 13) % 97) - 48) * (rank % 2 == 0 ? 0.03125f : 1.5f);
}

// The reference: f32 sum in rank order, then the element type's rounding (bits out).
std::vector<uint32_t> Expected(int size, int64_t count, DType dtype) {
  std::vector<uint32_t> out(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    float acc = 0;
    for (int r = 0; r < size; ++r) {
      float x = Input(r, j);
      if (dtype == DType::kBF16) x = __bfloat162float(__float2bfloat16_rn(x));
      acc = r == 0 ? x : acc + x;
    }
    uint32_t bits = 0;
    if (dtype == DType::kBF16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(acc);
      uint16_t h = 0;
      std::memcpy(&h, &b, 2);
      bits = h;
    } else {
      std::memcpy(&bits, &acc, 4);
    }
    out[static_cast<size_t>(j)] = bits;
  }
  return out;
}

// Uploads rank's input of `count` elements into `dev`.
bool Upload(void* dev, int rank, int64_t count, DType dtype) {
  std::vector<char> host(static_cast<size_t>(count * CollectiveElementBytes(dtype)));
  for (int64_t j = 0; j < count; ++j) {
    const float x = Input(rank, j);
    if (dtype == DType::kBF16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(x);
      std::memcpy(host.data() + j * 2, &b, 2);
    } else {
      std::memcpy(host.data() + j * 4, &x, 4);
    }
  }
  return cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess;
}

bool Matches(const void* dev, int size, int64_t count, DType dtype) {
  const size_t e = static_cast<size_t>(CollectiveElementBytes(dtype));
  std::vector<char> host(static_cast<size_t>(count) * e);
  if (cudaMemcpy(host.data(), dev, host.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  const std::vector<uint32_t> want = Expected(size, count, dtype);
  for (int64_t j = 0; j < count; ++j) {
    uint32_t got = 0;
    std::memcpy(&got, host.data() + static_cast<size_t>(j) * e, e);
    if (got != want[static_cast<size_t>(j)]) {
      std::fprintf(stderr, "element %lld of %lld: bits %08x, want %08x\n", static_cast<long long>(j),
                   static_cast<long long>(count), got, want[static_cast<size_t>(j)]);
      return false;
    }
  }
  return true;
}

struct Case {
  int64_t count;
  DType dtype;
};

// Back-to-back sums of mixed sizes and types (one-shot and, past one_shot_max_bytes at more
// than two ranks, two-shot), then one captured graph of two sums replayed twice.
int SumsLikeTheReference(int rank, int size, int port) {
  if (cudaSetDevice(0) != cudaSuccess) return 10;
  auto x = StoreExchange::Join(port, rank, size);
  if (x == nullptr) return 11;
  IpcAllReduceOptions o;
  o.max_bytes = int64_t{1} << 20;
  o.one_shot_max_bytes = int64_t{16} << 10;
  o.timeout = std::chrono::milliseconds(10000);
  auto ar = IpcAllReduce::Create(rank, size, o, [&](const std::vector<char>& m) { return (*x)(m); });
  if (!ar.ok()) {
    std::fprintf(stderr, "%s\n", ar.status().ToString().c_str());
    return 12;
  }
  const std::vector<Case> cases = {{8, DType::kBF16},       {4, DType::kF32},         {4096, DType::kBF16},
                                   {8 * 1001, DType::kBF16}, {3 * 4096 + 4, DType::kF32}, {(1 << 19), DType::kBF16},
                                   {8, DType::kBF16}};
  void* buf = nullptr;
  if (cudaMalloc(&buf, o.max_bytes) != cudaSuccess) return 13;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 14;  // blocking: after the uploads' DMA
  int code = 20;
  for (const Case& c : cases) {
    if (!(*ar)->Takes(c.count, c.dtype)) return code;
    if (!Upload(buf, rank, c.count, c.dtype) || !x->Barrier()) return code + 1;
    if (!(*ar)->AllReduceSum(buf, c.count, c.dtype, stream).ok()) return code + 2;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return code + 3;
    if (!Matches(buf, size, c.count, c.dtype)) return code + 4;
    code += 5;
  }
  // A graph of two sums (two buffers), replayed on fresh inputs.
  void* second = nullptr;
  if (cudaMalloc(&second, o.max_bytes) != cudaSuccess) return 60;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return 61;
  const bool captured = (*ar)->AllReduceSum(buf, 4096, DType::kBF16, stream).ok() &&
                        (*ar)->AllReduceSum(second, 40000, DType::kF32, stream).ok();
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !captured) return 62;
  // Uploaded before the ranks meet: a first launch that uploads would wait behind the
  // peer's kernel on the shared GPU.
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess || cudaGraphUpload(exec, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    return 63;
  for (int replay = 0; replay < 2; ++replay) {
    if (!Upload(buf, rank, 4096, DType::kBF16) || !Upload(second, rank, 40000, DType::kF32) || !x->Barrier())
      return 64;
    if (cudaGraphLaunch(exec, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) return 65;
    if (!Matches(buf, size, 4096, DType::kBF16) || !Matches(second, size, 40000, DType::kF32)) return 66;
  }
  // What it does not take: odd byte counts, other types, past the largest message.
  if ((*ar)->Takes(7, DType::kBF16) || (*ar)->Takes(8, DType::kI32) || (*ar)->Takes(o.max_bytes, DType::kBF16))
    return 67;
  x->Finish();
  return 0;
}

// Runs rank_main(rank, port) in `size` rank processes meeting at a fresh port: every rank
// must exit 0 (its code says where it failed otherwise).
void ExpectRanksPass(int size, const std::function<int(int rank, int port)>& rank_main,
                     std::chrono::seconds deadline = std::chrono::seconds(120)) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(size, [&](int rank) { return rank_main(rank, port); }, deadline);
  for (int r = 0; r < size; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << size << " ranks, rank " << r;
}

TEST(IpcAllReduceGpuTest, TwoAndFourProcessesSumLikeTheReference) {
  if (!ChildSeesGpu()) GTEST_SKIP() << "no CUDA device";
  for (int size : {2, 4})
    ExpectRanksPass(size, [&](int rank, int port) { return SumsLikeTheReference(rank, size, port); },
                    std::chrono::seconds(60));
}

// A device group for the wrapper's test: its all-gather goes through the store (host-staged),
// its all-reduce is counted, not run; nothing else is used.
class StoreGroup final : public Communicator {
 public:
  explicit StoreGroup(StoreExchange* x) : x_(x) {}
  int rank() const override { return x_->rank; }
  int size() const override { return x_->size; }
  const char* name() const override { return "store"; }
  Status AllReduceSum(void*, int64_t, DType) override {
    ++reduces;
    return Status::Ok();
  }
  Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    std::vector<char> mine(static_cast<size_t>(count * CollectiveElementBytes(dtype)));
    if (cudaMemcpy(mine.data(), in, mine.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return Internal("copy");
    PG_ASSIGN_OR_RETURN(std::vector<std::vector<char>> all, (*x_)(mine));
    for (size_t r = 0; r < all.size(); ++r)
      if (cudaMemcpy(static_cast<char*>(out) + r * mine.size(), all[r].data(), mine.size(), cudaMemcpyHostToDevice) !=
          cudaSuccess)
        return Internal("copy");
    return Status::Ok();
  }
  Status ReduceScatterSum(const void*, void*, int64_t, DType) override { return Unimplemented(""); }
  Status AllToAll(const void*, void*, int64_t, DType) override { return Unimplemented(""); }
  Status Broadcast(void*, int64_t, DType, int) override { return Unimplemented(""); }
  Status Send(const void*, int64_t, DType, int) override { return Unimplemented(""); }
  Status Recv(void*, int64_t, DType, int) override { return Unimplemented(""); }
  Status Barrier() override { return Unimplemented(""); }
  int reduces = 0;

 private:
  StoreExchange* x_;
};

int WrapperRoutes(int rank, int port) {
  if (cudaSetDevice(0) != cudaSuccess) return 10;
  auto x = StoreExchange::Join(port, rank, 2);
  if (x == nullptr) return 11;
  auto owned = std::make_unique<StoreGroup>(x.get());
  StoreGroup* group = owned.get();
  IpcAllReduceOptions o;
  o.max_bytes = 1 << 16;
  o.timeout = std::chrono::milliseconds(10000);
  std::string why;
  std::unique_ptr<Communicator> comm = WithIpcAllReduce(std::move(owned), o, &why);
  if (std::string(comm->name()) != "nccl + custom all-reduce") {
    std::fprintf(stderr, "no custom all-reduce: %s\n", why.c_str());
    return 12;
  }
  void* buf = nullptr;
  if (cudaMalloc(&buf, 1 << 17) != cudaSuccess) return 13;
  comm->UseStream(nullptr);
  if (!Upload(buf, rank, 1000, DType::kBF16) || !x->Barrier() || !comm->AllReduceSum(buf, 1000, DType::kBF16).ok())
    return 14;
  if (cudaDeviceSynchronize() != cudaSuccess || !Matches(buf, 2, 1000, DType::kBF16)) return 15;
  if (group->reduces != 0) return 16;  // taken by the custom path
  // 128 KiB: past max_bytes (64 KiB, which it still takes).
  if (!comm->AllReduceSum(buf, 1 << 16, DType::kBF16).ok() || group->reduces != 1) return 17;
  if (!comm->AllReduceSum(buf, 8, DType::kI32).ok() || group->reduces != 2) return 18;  // not a float type
  x->Finish();
  return 0;
}

TEST(IpcAllReduceGpuTest, TheCommunicatorTakesSmallFloatSumsAndPassesTheRest) {
  if (!ChildSeesGpu()) GTEST_SKIP() << "no CUDA device";
  ExpectRanksPass(2, WrapperRoutes);
}

// Rank 1 sets up and never sums; rank 0's sum must fail on its stream within the timeout.
int AbsentPeer(int rank, int port) {
  if (cudaSetDevice(0) != cudaSuccess) return 10;
  auto x = StoreExchange::Join(port, rank, 2);
  if (x == nullptr) return 11;
  IpcAllReduceOptions o;
  o.max_bytes = 1 << 16;
  o.timeout = std::chrono::milliseconds(1000);
  auto ar = IpcAllReduce::Create(rank, 2, o, [&](const std::vector<char>& m) { return (*x)(m); });
  if (!ar.ok()) return 12;
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(6));  // alive, mapped, absent
    x->Finish();
    return 0;
  }
  void* buf = nullptr;
  if (cudaMalloc(&buf, 1 << 12) != cudaSuccess) return 13;
  const auto start = std::chrono::steady_clock::now();
  if (!(*ar)->AllReduceSum(buf, 1024, DType::kBF16, nullptr).ok()) return 14;
  const cudaError_t e = cudaDeviceSynchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "absent peer: %s after %.2f s\n", cudaGetErrorString(e), seconds);
  if (e == cudaSuccess) return 15;
  if (seconds > 5.0) return 16;
  x->Finish();
  return 0;
}

TEST(IpcAllReduceGpuTest, APeerThatNeverSumsFailsTheStreamWithinTheTimeout) {
  if (!ChildSeesGpu()) GTEST_SKIP() << "no CUDA device";
  ExpectRanksPass(2, AbsentPeer);
}

}  // namespace
}  // namespace peregrine::distributed
