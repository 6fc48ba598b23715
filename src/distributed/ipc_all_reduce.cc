#include "distributed/ipc_all_reduce.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <utility>

#include "kernels/all_reduce.cuh"

namespace peregrine::distributed {

namespace {

// The allocation: signals first (padded to 256 bytes), then the staging buffer's two halves.
constexpr int64_t kSignalsBytes = (static_cast<int64_t>(sizeof(kernels::AllReduceSignals)) + 255) / 256 * 256;

Status CudaFailure(int rank, const std::string& what, cudaError_t e) {
  return Unavailable("rank " + std::to_string(rank) + ": custom all-reduce: " + what + ": " + cudaGetErrorString(e));
}

}  // namespace

IpcAllReduce::IpcAllReduce(int rank, int size, const IpcAllReduceOptions& options)
    : rank_(rank), size_(size), options_(options), mapped_(static_cast<size_t>(size), nullptr) {}

IpcAllReduce::~IpcAllReduce() {
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && mapped_[static_cast<size_t>(r)] != nullptr) cudaIpcCloseMemHandle(mapped_[static_cast<size_t>(r)]);
  if (own_ != nullptr) cudaFree(own_);
}

Result<std::unique_ptr<IpcAllReduce>> IpcAllReduce::Create(int rank, int size, const IpcAllReduceOptions& options,
                                                           const IpcExchange& exchange) {
  if (size < 2 || size > kernels::kAllReduceMaxRanks || rank < 0 || rank >= size)
    return InvalidArgument("the custom all-reduce takes 2 to " + std::to_string(kernels::kAllReduceMaxRanks) +
                           " ranks");
  if (options.max_bytes <= 0 || options.max_bytes % 16 != 0)
    return InvalidArgument("the custom all-reduce's largest message must be a positive multiple of 16 bytes");
  std::unique_ptr<IpcAllReduce> ar(new IpcAllReduce(rank, size, options));
  // Every rank takes the path or none does (a rank summing through NCCL while another waits
  // in the kernel would hang both), so a local failure still goes through both exchanges.
  std::string failure;
  const size_t total = static_cast<size_t>(kSignalsBytes + 2 * options.max_bytes);
  cudaIpcMemHandle_t handle{};
  if (cudaError_t e = cudaMalloc(&ar->own_, total); e != cudaSuccess) {
    ar->own_ = nullptr;
    failure = CudaFailure(rank, "allocating its buffers", e).message();
  } else if (e = cudaMemset(ar->own_, 0, total); e != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) {
    failure = CudaFailure(rank, "zeroing its buffers", e).message();
  } else if (e = cudaIpcGetMemHandle(&handle, ar->own_); e != cudaSuccess) {
    failure = CudaFailure(rank, "exporting its buffers", e).message();
  }
  // Exchange 1: [ok byte, handle].
  std::vector<char> mine(1 + sizeof handle);
  mine[0] = failure.empty() ? '1' : '0';
  std::memcpy(mine.data() + 1, &handle, sizeof handle);
  PG_ASSIGN_OR_RETURN(std::vector<std::vector<char>> handles, exchange(mine));
  if (handles.size() != static_cast<size_t>(size)) return Internal("custom all-reduce: the handle exchange is short");
  for (int r = 0; r < size; ++r) {
    const std::vector<char>& h = handles[static_cast<size_t>(r)];
    if (h.size() != mine.size()) return Internal("custom all-reduce: a malformed handle from rank " + std::to_string(r));
    if (h[0] != '1')
      return Unavailable(failure.empty() ? "rank " + std::to_string(r) + " could not set up its buffers" : failure);
  }
  ar->mapped_[static_cast<size_t>(rank)] = ar->own_;
  for (int r = 0; r < size && failure.empty(); ++r) {
    if (r == rank) continue;
    cudaIpcMemHandle_t theirs{};
    std::memcpy(&theirs, handles[static_cast<size_t>(r)].data() + 1, sizeof theirs);
    void* p = nullptr;
    if (cudaError_t e = cudaIpcOpenMemHandle(&p, theirs, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
      failure = CudaFailure(rank, "mapping rank " + std::to_string(r) + "'s buffers", e).message();
      cudaGetLastError();
    } else {
      ar->mapped_[static_cast<size_t>(r)] = p;
    }
  }
  // Exchange 2: whether each rank mapped every peer.
  PG_ASSIGN_OR_RETURN(std::vector<std::vector<char>> mapped, exchange(std::vector<char>{failure.empty() ? '1' : '0'}));
  for (int r = 0; r < size; ++r) {
    const std::vector<char>& ok = mapped[static_cast<size_t>(r)];
    if (ok.size() != 1 || ok[0] != '1')
      return Unavailable(failure.empty() ? "rank " + std::to_string(r) + " could not map its peers' buffers" : failure);
  }
  return ar;
}

bool IpcAllReduce::Takes(int64_t count, DType dtype) const {
  if (dtype != DType::kBF16 && dtype != DType::kF32) return false;
  const int64_t bytes = count * CollectiveElementBytes(dtype);
  return count > 0 && bytes % 16 == 0 && bytes <= options_.max_bytes;
}

Status IpcAllReduce::AllReduceSum(void* buf, int64_t count, DType dtype, void* stream) {
  if (!Takes(count, dtype)) return InvalidArgument("the custom all-reduce does not take this message");
  kernels::AllReduceParams p;
  p.buf = buf;
  for (int r = 0; r < size_; ++r) {
    char* base = static_cast<char*>(mapped_[static_cast<size_t>(r)]);
    p.signals[r] = reinterpret_cast<kernels::AllReduceSignals*>(base);
    p.staging[r] = base + kSignalsBytes;
  }
  p.count = count;
  p.staging_bytes = 2 * options_.max_bytes;
  p.element = dtype == DType::kF32 ? kernels::AllReduceElement::kF32 : kernels::AllReduceElement::kBF16;
  const int64_t bytes = count * CollectiveElementBytes(dtype);
  p.algorithm = size_ == 2 || bytes <= options_.one_shot_max_bytes ? kernels::AllReduceAlgorithm::kOneShot
                                                                    : kernels::AllReduceAlgorithm::kTwoShot;
  p.rank = rank_;
  p.size = size_;
  p.timeout_ns = static_cast<uint64_t>(options_.timeout.count()) * 1'000'000ull;
  if (cudaError_t e = kernels::LaunchAllReduce(p, static_cast<cudaStream_t>(stream)); e != cudaSuccess)
    return CudaFailure(rank_, "launch", e);
  return Status::Ok();
}

namespace {

class IpcAllReduceCommunicator final : public Communicator {
 public:
  IpcAllReduceCommunicator(std::unique_ptr<Communicator> group, std::unique_ptr<IpcAllReduce> ipc)
      : group_(std::move(group)), ipc_(std::move(ipc)) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const char* name() const override { return "nccl + custom all-reduce"; }

  Status AllReduceSum(void* buf, int64_t count, DType dtype) override {
    if (ipc_->Takes(count, dtype)) return ipc_->AllReduceSum(buf, count, dtype, stream_);
    return group_->AllReduceSum(buf, count, dtype);
  }
  Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    return group_->AllGather(in, out, count, dtype);
  }
  Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype) override {
    return group_->ReduceScatterSum(in, out, count, dtype);
  }
  Status AllToAll(const void* in, void* out, int64_t count, DType dtype) override {
    return group_->AllToAll(in, out, count, dtype);
  }
  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    return group_->Broadcast(buf, count, dtype, root);
  }
  Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    return group_->Send(buf, count, dtype, peer);
  }
  Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    return group_->Recv(buf, count, dtype, peer);
  }
  Status Barrier() override { return group_->Barrier(); }
  void UseStream(void* stream) override {
    stream_ = stream;
    group_->UseStream(stream);
  }

 private:
  std::unique_ptr<Communicator> group_;
  std::unique_ptr<IpcAllReduce> ipc_;
  void* stream_ = nullptr;
};

// The setup exchange over the group itself: device buffers, the legacy stream, synchronised.
Result<std::vector<std::vector<char>>> ExchangeOver(Communicator& group, const std::vector<char>& mine) {
  const size_t n = mine.size();
  const size_t ranks = static_cast<size_t>(group.size());
  void* dev = nullptr;
  if (cudaMalloc(&dev, n * (ranks + 1)) != cudaSuccess) return Unavailable("custom all-reduce: no memory to exchange");
  std::vector<char> all(n * ranks);
  group.UseStream(nullptr);
  Status s = Status::Ok();
  if (cudaMemcpy(static_cast<char*>(dev) + n * ranks, mine.data(), n, cudaMemcpyHostToDevice) != cudaSuccess)
    s = Unavailable("custom all-reduce: exchange upload failed");
  if (s.ok()) s = group.AllGather(static_cast<char*>(dev) + n * ranks, dev, static_cast<int64_t>(n), DType::kU8);
  if (s.ok() && cudaMemcpy(all.data(), dev, n * ranks, cudaMemcpyDeviceToHost) != cudaSuccess)
    s = Unavailable("custom all-reduce: exchange download failed");
  cudaFree(dev);
  PG_RETURN_IF_ERROR(s);
  std::vector<std::vector<char>> out(ranks);
  for (size_t r = 0; r < ranks; ++r) out[r].assign(all.begin() + static_cast<std::ptrdiff_t>(r * n),
                                                   all.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
  return out;
}

}  // namespace

IpcExchange DeviceGroupExchange(Communicator& group) {
  return [&group](const std::vector<char>& mine) { return ExchangeOver(group, mine); };
}

std::unique_ptr<Communicator> WithIpcAllReduce(std::unique_ptr<Communicator> group, const IpcAllReduceOptions& options,
                                               std::string* why_not) {
  Communicator& g = *group;
  auto ipc = IpcAllReduce::Create(g.rank(), g.size(), options, DeviceGroupExchange(g));
  if (!ipc.ok()) {
    if (why_not != nullptr) *why_not = ipc.status().message();
    return group;
  }
  return std::make_unique<IpcAllReduceCommunicator>(std::move(group), std::move(ipc).value());
}

}  // namespace peregrine::distributed
