// Communicator over Gloo's TCP transport. The rendezvous (TcpStore) is adapted to Gloo's
// Store; rank 0 also serves it. Every collective uses a fresh tag so that a failed call cannot
// pair with a later one.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <cstring>
#include <vector>

#include "distributed/communicator.h"
#include "distributed/tcp_store.h"

namespace peregrine::distributed {

namespace {

// Gloo's rendezvous over our store (Gloo reports failures by throwing).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s = store_.Set(key, data);
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  std::vector<char> get(const std::string& key) override {
    auto r = store_.Get(key);
    if (!r.ok()) throw std::runtime_error(r.status().message());
    return std::move(r).value();
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  TcpStore& store_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<TcpStoreServer> server, std::unique_ptr<TcpStore> store,
                   std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout)
      : server_(std::move(server)), store_(std::move(store)), context_(std::move(context)), timeout_(timeout) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const char* name() const override { return "gloo"; }

  Status AllReduceSum(void* buf, int64_t count, DType dtype) override {
    if (dtype != DType::kF32) return Unimplemented("CPU all-reduce sums f32 only");
    return Run("all-reduce", dtype, [&](uint32_t tag) {
      gloo::AllreduceOptions o(context_);
      o.setOutput(static_cast<float*>(buf), static_cast<size_t>(count));
      // Ring: each element is summed once, in one order, then copied: every rank gets the same bits.
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::allreduce(o);
    });
  }
  Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    const size_t bytes = Bytes(count, dtype);
    return Run("all-gather", dtype, [&](uint32_t tag) {
      gloo::AllgatherOptions o(context_);
      o.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
      o.setOutput(static_cast<char*>(out), bytes * static_cast<size_t>(size()));
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::allgather(o);
    });
  }
  Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype) override {
    // Sum everything, keep this rank's row: the reference behaviour, not the fast one.
    std::vector<char> all(static_cast<const char*>(in),
                          static_cast<const char*>(in) + Bytes(count, dtype) * static_cast<size_t>(size()));
    PG_RETURN_IF_ERROR(AllReduceSum(all.data(), count * size(), dtype));
    std::memcpy(out, all.data() + Bytes(count, dtype) * static_cast<size_t>(rank()), Bytes(count, dtype));
    return Status::Ok();
  }
  Status AllToAll(const void* in, void* out, int64_t count, DType dtype) override {
    const size_t bytes = Bytes(count, dtype) * static_cast<size_t>(size());
    return Run("all-to-all", dtype, [&](uint32_t tag) {
      gloo::AlltoallOptions o(context_);
      o.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
      o.setOutput(static_cast<char*>(out), bytes);
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::alltoall(o);
    });
  }
  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    if (root < 0 || root >= size()) return InvalidArgument("broadcast root outside the group");
    return Run("broadcast", dtype, [&](uint32_t tag) {
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<char*>(buf), Bytes(count, dtype));
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
  }
  Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    if (peer < 0 || peer >= size() || peer == rank()) return InvalidArgument("send to a rank outside the group");
    return Run("send", dtype, [&](uint32_t) {
      auto b = context_->createUnboundBuffer(const_cast<void*>(buf), Bytes(count, dtype));
      b->send(peer, PairSlot(rank(), peer));
      b->waitSend(timeout_);
    });
  }
  Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    if (peer < 0 || peer >= size() || peer == rank()) return InvalidArgument("receive from a rank outside the group");
    return Run("receive", dtype, [&](uint32_t) {
      auto b = context_->createUnboundBuffer(buf, Bytes(count, dtype));
      b->recv(peer, PairSlot(peer, rank()));
      b->waitRecv(timeout_);
    });
  }
  Status Barrier() override {
    return Run("barrier", DType::kU8, [&](uint32_t tag) {
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }

 private:
  static size_t Bytes(int64_t count, DType dtype) {
    return static_cast<size_t>(count * CollectiveElementBytes(dtype));
  }
  // Point-to-point messages from `from` to `to` share one slot, in order; collectives use tags
  // from another range.
  uint64_t PairSlot(int from, int to) const { return (1ull << 40) + static_cast<uint64_t>(from * size() + to); }

  template <typename Fn>
  Status Run(const char* what, DType dtype, Fn&& fn) {
    if (CollectiveElementBytes(dtype) == 0) return InvalidArgument(std::string(what) + " of a sub-byte dtype");
    if (!failed_.ok()) return failed_;
    try {
      fn(next_tag_++);
    } catch (const std::exception& e) {
      failed_ = Unavailable(std::string("rank ") + std::to_string(rank()) + ": " + what + " failed (a rank died or " +
                            "stopped answering): " + e.what());
      return failed_;
    }
    return Status::Ok();
  }

  std::shared_ptr<TcpStoreServer> server_;  // rank 0's rendezvous, outlives the store below
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 1;
  Status failed_ = Status::Ok();
};

}  // namespace

Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const Rendezvous& r) {
  if (r.size < 1 || r.rank < 0 || r.rank >= r.size) return InvalidArgument("rank outside the group");
  // Gloo writes to its peers' sockets without MSG_NOSIGNAL: a write to a rank that has died
  // would raise SIGPIPE and end this process instead of failing the collective. Ignored once
  // for the process (nothing here expects the signal).
  static const bool sigpipe_ignored = [] { return std::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  if (!sigpipe_ignored) return Internal("SIGPIPE could not be ignored");
  std::shared_ptr<TcpStoreServer> server = r.rank == 0 ? r.server : nullptr;
  if (r.rank == 0 && server == nullptr) {
    PG_ASSIGN_OR_RETURN(server, TcpStoreServer::Start(r.host, r.port));
  }
  const int port = server != nullptr ? server->port() : r.port;
  PG_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Connect(r.host, port, r.timeout));
  try {
    gloo::transport::tcp::attr attr;
    // Each rank listens on the interface that reaches the rendezvous host (loopback locally).
    attr.hostname = r.host == "127.0.0.1" || r.host == "localhost" ? "127.0.0.1" : "";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(r.rank, r.size);
    context->setTimeout(r.timeout);
    StoreAdapter adapter(*store);
    context->connectFullMesh(adapter, device);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(std::move(server), std::move(store), std::move(context), r.timeout));
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(r.rank) + " could not join its group of " + std::to_string(r.size) +
                       ": " + e.what());
  }
}

}  // namespace peregrine::distributed
