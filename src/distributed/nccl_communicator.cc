#include "distributed/nccl_communicator.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "distributed/tcp_store.h"

namespace peregrine::distributed {

namespace {

// The entry points used, resolved from the loaded library.
struct NcclApi {
  void* handle = nullptr;
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;

  ~NcclApi() {
    if (handle != nullptr) dlclose(handle);
  }
};

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return *fn != nullptr;
}

Result<std::shared_ptr<NcclApi>> LoadNccl(const std::string& library) {
  auto api = std::make_shared<NcclApi>();
  api->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr)
    return Unavailable("cannot load NCCL from '" + library + "': " + dlerror() +
                       " (install the CUDA toolkit's NCCL or the nvidia-nccl wheel, or name it with --nccl-library)");
  const bool ok = Resolve(api->handle, "ncclGetVersion", &api->GetVersion) &&
                  Resolve(api->handle, "ncclGetUniqueId", &api->GetUniqueId) &&
                  Resolve(api->handle, "ncclCommInitRank", &api->CommInitRank) &&
                  Resolve(api->handle, "ncclCommDestroy", &api->CommDestroy) &&
                  Resolve(api->handle, "ncclCommAbort", &api->CommAbort) &&
                  Resolve(api->handle, "ncclCommGetAsyncError", &api->CommGetAsyncError) &&
                  Resolve(api->handle, "ncclGetErrorString", &api->GetErrorString) &&
                  Resolve(api->handle, "ncclAllReduce", &api->AllReduce) &&
                  Resolve(api->handle, "ncclAllGather", &api->AllGather) &&
                  Resolve(api->handle, "ncclReduceScatter", &api->ReduceScatter) &&
                  Resolve(api->handle, "ncclBroadcast", &api->Broadcast) &&
                  Resolve(api->handle, "ncclSend", &api->Send) && Resolve(api->handle, "ncclRecv", &api->Recv) &&
                  Resolve(api->handle, "ncclGroupStart", &api->GroupStart) &&
                  Resolve(api->handle, "ncclGroupEnd", &api->GroupEnd);
  if (!ok) return Unavailable("'" + library + "' is not an NCCL library (a symbol is missing)");
  int version = 0;
  if (api->GetVersion(&version) != ncclSuccess || version < 21800)
    return Unavailable("'" + library + "' is NCCL " + std::to_string(version) + "; 2.18 or newer is needed");
  return api;
}

Result<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kI8: return ncclInt8;
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kUE8M0: return ncclUint8;
    case DType::kI16:
    case DType::kE2M1: break;
  }
  return InvalidArgument("NCCL has no type for this dtype");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclApi> api, ncclComm_t comm, int rank, int size, cudaStream_t stream,
                   std::chrono::milliseconds timeout)
      : api_(std::move(api)), comm_(comm), rank_(rank), size_(size), stream_(stream), timeout_(timeout) {}
  ~NcclCommunicator() override {
    if (flag_ != nullptr) cudaFree(flag_);
    if (failed_.ok()) api_->CommDestroy(comm_);
    else api_->CommAbort(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }

  Status AllReduceSum(void* buf, int64_t count, DType dtype) override {
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return Check("all-reduce", api_->AllReduce(buf, buf, static_cast<size_t>(count), t, ncclSum, comm_, stream_));
  }
  Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return Check("all-gather", api_->AllGather(in, out, static_cast<size_t>(count), t, comm_, stream_));
  }
  Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype) override {
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return Check("reduce-scatter",
                 api_->ReduceScatter(in, out, static_cast<size_t>(count), t, ncclSum, comm_, stream_));
  }
  Status AllToAll(const void* in, void* out, int64_t count, DType dtype) override {
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    const size_t bytes = static_cast<size_t>(count * CollectiveElementBytes(dtype));
    PG_RETURN_IF_ERROR(Check("all-to-all", api_->GroupStart()));
    for (int r = 0; r < size_; ++r) {
      ncclResult_t s = api_->Send(static_cast<const char*>(in) + bytes * static_cast<size_t>(r),
                                  static_cast<size_t>(count), t, r, comm_, stream_);
      if (s == ncclSuccess)
        s = api_->Recv(static_cast<char*>(out) + bytes * static_cast<size_t>(r), static_cast<size_t>(count), t, r,
                       comm_, stream_);
      if (s != ncclSuccess) {
        api_->GroupEnd();
        return Check("all-to-all", s);
      }
    }
    return Check("all-to-all", api_->GroupEnd());
  }
  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    if (root < 0 || root >= size_) return InvalidArgument("broadcast root outside the group");
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return Check("broadcast", api_->Broadcast(buf, buf, static_cast<size_t>(count), t, root, comm_, stream_));
  }
  Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return Check("send", api_->Send(buf, static_cast<size_t>(count), t, peer, comm_, stream_));
  }
  Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    PG_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return Check("receive", api_->Recv(buf, static_cast<size_t>(count), t, peer, comm_, stream_));
  }
  void UseStream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }
  // A one-element all-reduce, then waits for the stream, watching for NCCL's asynchronous
  // errors; a peer that never arrives aborts the communicator after the timeout.
  Status Barrier() override {
    if (flag_ == nullptr && cudaMalloc(&flag_, sizeof(float)) != cudaSuccess)
      return Internal("cannot allocate the barrier's flag");
    PG_RETURN_IF_ERROR(AllReduceSum(flag_, 1, DType::kF32));
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return Fail(std::string("barrier: ") + cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      api_->CommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) return Check("barrier", async);
      if (std::chrono::steady_clock::now() >= deadline) return Fail("barrier: a rank did not arrive in time");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  Status Check(const char* what, ncclResult_t r) {
    if (!failed_.ok()) return failed_;
    if (r == ncclSuccess) return Status::Ok();
    return Fail(std::string(what) + ": " + api_->GetErrorString(r));
  }
  Status Fail(const std::string& why) {
    failed_ = Unavailable("rank " + std::to_string(rank_) + ": NCCL " + why);
    return failed_;
  }

  std::shared_ptr<NcclApi> api_;
  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t stream_;
  std::chrono::milliseconds timeout_;
  void* flag_ = nullptr;  // [1] f32, the barrier's payload
  Status failed_ = Status::Ok();
};

}  // namespace

Result<int> NcclLibraryVersion(const std::string& library) {
  PG_ASSIGN_OR_RETURN(std::shared_ptr<NcclApi> api, LoadNccl(library));
  int version = 0;
  api->GetVersion(&version);
  return version;
}

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const Rendezvous& r, const NcclOptions& options) {
  if (r.size < 1 || r.rank < 0 || r.rank >= r.size) return InvalidArgument("rank outside the group");
  // NVLink multicast (NVLS) stays off whatever the environment says: NCCL would otherwise
  // create multicast objects on NVSwitch hosts.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  PG_ASSIGN_OR_RETURN(std::shared_ptr<NcclApi> api, LoadNccl(options.library));
  std::shared_ptr<TcpStoreServer> server = r.rank == 0 ? r.server : nullptr;
  if (r.rank == 0 && r.size > 1 && server == nullptr) {
    PG_ASSIGN_OR_RETURN(server, TcpStoreServer::Start(r.host, r.port));
  }
  const int port = server != nullptr ? server->port() : r.port;
  ncclUniqueId id{};
  if (r.rank == 0) {
    const ncclResult_t s = api->GetUniqueId(&id);
    if (s != ncclSuccess) return Unavailable(std::string("ncclGetUniqueId: ") + api->GetErrorString(s));
  }
  std::unique_ptr<TcpStore> store;
  if (r.size > 1) {
    PG_ASSIGN_OR_RETURN(store, TcpStore::Connect(r.host, port, r.timeout));
    if (r.rank == 0) {
      PG_RETURN_IF_ERROR(store->Set("nccl_unique_id", std::vector<char>(id.internal, id.internal + sizeof id.internal)));
    } else {
      PG_ASSIGN_OR_RETURN(std::vector<char> bytes, store->Get("nccl_unique_id"));
      if (bytes.size() != sizeof id.internal) return Internal("the rendezvous holds a malformed NCCL id");
      std::copy(bytes.begin(), bytes.end(), id.internal);
    }
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t s = api->CommInitRank(&comm, r.size, id, r.rank);
  if (s != ncclSuccess)
    return Unavailable("rank " + std::to_string(r.rank) + " could not join NCCL: " + api->GetErrorString(s));
  // Every rank has joined once CommInitRank returns; the store and its server can go.
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(api), comm, r.rank, r.size,
                                                            static_cast<cudaStream_t>(options.stream), r.timeout));
}

}  // namespace peregrine::distributed
