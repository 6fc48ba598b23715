// The custom all-reduce (distributed/ipc_all_reduce: CUDA IPC, one-shot or two-shot) against
// NCCL between the GPUs of one host, per message size. One process per GPU (forked before
// any CUDA call); each rank captures `calls` back-to-back bf16 sums in one CUDA graph per
// path (as the decode step runs them) and replays it `runs` times. Prints microseconds per
// sum (median replay / calls, rank 0's), bus bandwidth (bytes x 2(N-1)/N per second, NCCL's
// convention) against NVLink's 450 GB/s per direction, the custom/NCCL time ratio, and checks
// the two sums agree on random inputs first. Needs N GPUs (NCCL refuses two ranks on one);
// with fewer it says so and exits 2.
//   peregrine_all_reduce_bench [--ranks N] [--sizes B,B,...] [--calls C] [--runs R] [--out FILE]
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/ipc_all_reduce.h"
#include "distributed/nccl_communicator.h"

namespace {

namespace dist = peregrine::distributed;
using peregrine::DType;

constexpr double kNvlinkGBs = 450.0;  // H200 NVLink 4, per direction

struct Options {
  int ranks = 2;
  std::vector<int64_t> sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20};
  int calls = 20;
  int runs = 10;
  std::string out;
};

void Fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  std::_Exit(1);
}
void Check(int rank, cudaError_t e, const char* what) {
  if (e != cudaSuccess) Fail(rank, std::string(what) + ": " + cudaGetErrorString(e));
}
void Check(int rank, const peregrine::Status& s, const char* what) {
  if (!s.ok()) Fail(rank, std::string(what) + ": " + s.ToString());
}

// Median milliseconds of one replay of `exec` on `stream`.
double MedianReplayMs(int rank, cudaGraphExec_t exec, cudaStream_t stream, int runs) {
  cudaEvent_t a, b;
  Check(rank, cudaEventCreate(&a), "event");
  Check(rank, cudaEventCreate(&b), "event");
  Check(rank, cudaGraphLaunch(exec, stream), "warm-up replay");
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    Check(rank, cudaEventRecord(a, stream), "record");
    Check(rank, cudaGraphLaunch(exec, stream), "replay");
    Check(rank, cudaEventRecord(b, stream), "record");
    Check(rank, cudaEventSynchronize(b), "sync");
    float t = 0;
    Check(rank, cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// `calls` sums of buf [count] captured on `stream` through `sum`.
template <typename Sum>
cudaGraphExec_t Capture(int rank, cudaStream_t stream, int calls, Sum&& sum) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Check(rank, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < calls; ++i) Check(rank, sum(), "captured sum");
  Check(rank, cudaStreamEndCapture(stream, &graph), "end capture");
  Check(rank, cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaGraphDestroy(graph);
  return exec;
}

std::vector<uint16_t> RandomBf16(int rank, int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(1234 + rank));
  std::normal_distribution<float> normal;
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const __nv_bfloat16 b = __float2bfloat16_rn(normal(rng));
    std::memcpy(&x, &b, 2);
  }
  return v;
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t w = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

int RunRank(int rank, const Options& o, int port) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < o.ranks) {
    if (rank == 0)
      std::fprintf(stderr, "peregrine_all_reduce_bench: %d ranks need %d GPUs; this machine has %d\n", o.ranks,
                   o.ranks, devices);
    return 2;
  }
  Check(rank, cudaSetDevice(rank), "set device");
  dist::Rendezvous r;
  r.port = port;
  r.rank = rank;
  r.size = o.ranks;
  auto nccl = dist::CreateNcclCommunicator(r, {});
  if (!nccl.ok()) Fail(rank, nccl.status().ToString());
  dist::Communicator& group = **nccl;
  const int64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  dist::IpcAllReduceOptions io;
  io.max_bytes = std::max<int64_t>(largest, 16);
  auto ipc = dist::IpcAllReduce::Create(rank, o.ranks, io, dist::DeviceGroupExchange(group));
  if (!ipc.ok()) Fail(rank, ipc.status().ToString());
  cudaStream_t stream = nullptr;
  Check(rank, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  group.UseStream(stream);
  void *a = nullptr, *b = nullptr;
  Check(rank, cudaMalloc(&a, static_cast<size_t>(largest)), "alloc");
  Check(rank, cudaMalloc(&b, static_cast<size_t>(largest)), "alloc");

  std::ofstream out;
  if (rank == 0 && !o.out.empty()) out.open(o.out, std::ios::app);
  if (rank == 0)
    std::printf("%d ranks, bf16 sums, %d per graph; bus GB/s against NVLink's %.0f per direction\n"
                "%10s %10s %10s %12s %12s %8s\n",
                o.ranks, o.calls, kNvlinkGBs, "bytes", "nccl us", "custom us", "nccl GB/s", "custom GB/s", "ratio");
  for (int64_t bytes : o.sizes) {
    const int64_t count = bytes / 2;
    if (!(*ipc)->Takes(count, DType::kBF16)) Fail(rank, "a size the custom all-reduce does not take");
    // Agreement first: one sum each way of the same random inputs.
    const std::vector<uint16_t> input = RandomBf16(rank, count);
    Check(rank, cudaMemcpy(a, input.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "upload");
    Check(rank, cudaMemcpy(b, input.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "upload");
    Check(rank, group.AllReduceSum(a, count, DType::kBF16), "nccl sum");
    Check(rank, (*ipc)->AllReduceSum(b, count, DType::kBF16, stream), "custom sum");
    Check(rank, cudaStreamSynchronize(stream), "sums");
    std::vector<uint16_t> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
    Check(rank, cudaMemcpy(x.data(), a, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), "download");
    Check(rank, cudaMemcpy(y.data(), b, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), "download");
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(Bf16ToFloat(x[i]) - Bf16ToFloat(y[i]))) /
                                  (1.0 + std::fabs(Bf16ToFloat(x[i]))));
    if (!(worst <= 2.0 / 128)) Fail(rank, "the custom sum differs from NCCL's by " + std::to_string(worst));
    // Timing: zeros (no overflow over many in-place sums; no data-dependent speed).
    Check(rank, cudaMemset(a, 0, static_cast<size_t>(bytes)), "zero");
    Check(rank, cudaMemset(b, 0, static_cast<size_t>(bytes)), "zero");
    Check(rank, cudaDeviceSynchronize(), "zero");
    cudaGraphExec_t g_nccl = Capture(rank, stream, o.calls, [&] { return group.AllReduceSum(a, count, DType::kBF16); });
    cudaGraphExec_t g_ipc =
        Capture(rank, stream, o.calls, [&] { return (*ipc)->AllReduceSum(b, count, DType::kBF16, stream); });
    // Interleaved, twice, the better of each.
    double t_nccl = 1e30, t_ipc = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      t_nccl = std::min(t_nccl, MedianReplayMs(rank, g_nccl, stream, o.runs) * 1000.0 / o.calls);
      t_ipc = std::min(t_ipc, MedianReplayMs(rank, g_ipc, stream, o.runs) * 1000.0 / o.calls);
    }
    cudaGraphExecDestroy(g_nccl);
    cudaGraphExecDestroy(g_ipc);
    const double bus = static_cast<double>(bytes) * 2.0 * (o.ranks - 1) / o.ranks;
    const double bw_nccl = bus / (t_nccl * 1e-6) / 1e9, bw_ipc = bus / (t_ipc * 1e-6) / 1e9;
    if (rank == 0) {
      std::printf("%10lld %10.2f %10.2f %12.1f %12.1f %8.3f\n", static_cast<long long>(bytes), t_nccl, t_ipc, bw_nccl,
                  bw_ipc, t_ipc / t_nccl);
      std::fflush(stdout);
      if (out.is_open())
        out << "{\"ranks\":" << o.ranks << ",\"bytes\":" << bytes << ",\"calls_per_graph\":" << o.calls
            << ",\"nccl_us\":" << t_nccl << ",\"custom_us\":" << t_ipc << ",\"nccl_busbw_gbs\":" << bw_nccl
            << ",\"custom_busbw_gbs\":" << bw_ipc << ",\"nvlink_gbs\":" << kNvlinkGBs
            << ",\"custom_vs_nccl\":" << t_ipc / t_nccl << ",\"worst_rel_diff_vs_nccl\":" << worst << "}\n";
    }
  }
  Check(rank, group.Barrier(), "barrier");
  ipc->reset();
  return 0;
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr) {
      std::fprintf(stderr, "%s needs a value\n", arg.c_str());
      return 2;
    }
    ++i;
    if (arg == "--ranks") {
      o.ranks = std::atoi(value);
    } else if (arg == "--calls") {
      o.calls = std::max(1, std::atoi(value));
    } else if (arg == "--runs") {
      o.runs = std::max(1, std::atoi(value));
    } else if (arg == "--out") {
      o.out = value;
    } else if (arg == "--sizes") {
      o.sizes.clear();
      std::stringstream ss(value);
      for (std::string item; std::getline(ss, item, ',');) o.sizes.push_back(std::atoll(item.c_str()));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  if (o.ranks < 2 || o.ranks > 8 || o.sizes.empty() ||
      std::any_of(o.sizes.begin(), o.sizes.end(), [](int64_t s) { return s <= 0 || s % 16 != 0; })) {
    std::fprintf(stderr, "--ranks is 2 to 8; --sizes are positive multiples of 16 bytes\n");
    return 2;
  }
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(RunRank(r, o, port));
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    worst = std::max(worst, code);
  }
  return worst;
}
