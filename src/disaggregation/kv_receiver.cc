#include "disaggregation/kv_receiver.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "disaggregation/transfer_wire.h"
#include "disaggregation/ucx_worker.h"

namespace peregrine::disaggregation {

namespace {

using Clock = std::chrono::steady_clock;

// Bounds on what an unverified peer can make the receiver allocate (the meta is checked
// only once it is whole).
constexpr size_t kMaxPageIndex = size_t{1} << 20;
constexpr uint64_t kMaxPullBytes = uint64_t{64} << 30;

}  // namespace

struct KvReceiver::Impl {
  struct PullState {
    uint64_t room = 0;
    std::string host;
    uint16_t port = 0;
    Done done;
    Clock::time_point start, deadline;
    ucp_ep_h ep = nullptr;
    bool ended = false;
    std::vector<uint8_t> meta_bytes;
    bool has_meta_bytes = false;
    std::vector<std::vector<uint8_t>> pages;
    std::vector<uint8_t> page_arrived;
    uint64_t bytes = 0;
    int pending = 0;  // receives in flight (rendezvous)
    std::string fault;  // a receive failed
  };
  struct RecvContext {
    Impl* impl;
    std::shared_ptr<PullState> pull;
  };
  // Rooms whose device pages the engine is done with (their last reference dropped, on any
  // thread), for the thread to release; outlives the receiver if a reference does.
  struct Releases {
    std::mutex mu;
    std::vector<uint64_t> rooms;
    UcxWorker* ucx = nullptr;  // null once the receiver stops
  };
  struct Closing {
    ucp_ep_h ep;
    Clock::time_point at;
  };

  KvReceiverConfig config;
  std::unique_ptr<UcxWorker> ucx;
  std::thread thread;
  std::atomic<bool> stopping{false};

  mutable std::mutex mu;
  std::vector<std::shared_ptr<PullState>> submitted;
  KvReceiverStats counts;

  // The thread's (and UCX callbacks').
  std::unordered_map<uint64_t, std::shared_ptr<PullState>> pulls;  // by room
  std::vector<uint64_t> touched;                                   // rooms to look at after progress
  std::vector<ucp_ep_h> failed;
  std::shared_ptr<Releases> releases = std::make_shared<Releases>();
  std::unordered_map<uint64_t, ucp_ep_h> lent;  // rooms of device pages not released yet
  std::vector<Closing> closing;                 // endpoints that sent a release

  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) { static_cast<Impl*>(arg)->failed.push_back(ep); }

  // Closes an endpoint and forgets any error it reported: once freed, its address may come
  // back for a new endpoint, which an old entry in `failed` would then fail.
  void CloseEp(ucp_ep_h ep) {
    ucx->Close(ep);
    std::erase(failed, ep);
  }

  static void RecvDone(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
    auto* ctx = static_cast<RecvContext*>(user_data);
    --ctx->pull->pending;
    if (status != UCS_OK && ctx->pull->fault.empty()) ctx->pull->fault = ucs_status_string(status);
    ctx->impl->touched.push_back(ctx->pull->room);
    delete ctx;
    if (request != nullptr) ucp_request_free(request);
  }

  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Impl*>(arg);
    const Result<WireHeader> h = ParseHeader({static_cast<const uint8_t*>(header), header_length});
    if (!h.ok()) return UCS_OK;
    auto it = self->pulls.find(h->room);
    if (it == self->pulls.end() || it->second->ended) return UCS_OK;  // late: ignored
    const std::shared_ptr<PullState> st = it->second;
    self->touched.push_back(st->room);
    std::vector<uint8_t>* buffer = nullptr;
    if (h->kind == static_cast<uint16_t>(MessageKind::kMeta) && !st->has_meta_bytes) {
      st->has_meta_bytes = true;
      buffer = &st->meta_bytes;
    } else if (h->kind == static_cast<uint16_t>(MessageKind::kPage) && h->index < kMaxPageIndex) {
      if (st->pages.size() <= h->index) {
        st->pages.resize(h->index + 1);
        st->page_arrived.resize(h->index + 1, 0);
      }
      if (st->page_arrived[h->index] != 0) {
        st->fault = "a page arrived twice";
        return UCS_OK;
      }
      st->page_arrived[h->index] = 1;
      buffer = &st->pages[h->index];
    } else {
      st->fault = "an unexpected message";
      return UCS_OK;
    }
    st->bytes += length;
    if (st->bytes > kMaxPullBytes) {
      st->fault = "more bytes than any KV holds";
      return UCS_OK;
    }
    buffer->resize(length);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
      if (length > 0) std::memcpy(buffer->data(), data, length);
      return UCS_OK;
    }
    auto* ctx = new RecvContext{self, st};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = RecvDone;
    p.user_data = ctx;
    ++st->pending;
    const ucs_status_ptr_t r = ucp_am_recv_data_nbx(self->ucx->worker(), data, buffer->data(), length, &p);
    if (r == nullptr) {
      RecvDone(nullptr, UCS_OK, length, ctx);
    } else if (UCS_PTR_IS_ERR(r)) {
      RecvDone(nullptr, UCS_PTR_STATUS(r), length, ctx);
    }
    return UCS_OK;
  }

  // By value: erasing the pull from `pulls` must not free the state under us.
  void End(std::shared_ptr<PullState> st, Result<TransferredKv> result) {
    st->ended = true;
    pulls.erase(st->room);
    if (st->ep != nullptr) {
      // Device pages: the endpoint stays for the release.
      if (result.ok() && result->device != nullptr) {
        auto [it, fresh] = lent.try_emplace(st->room, st->ep);
        if (!fresh) {  // an earlier pull of the same room was never released: its endpoint goes
          CloseEp(it->second);
          it->second = st->ep;
        }
      } else {
        CloseEp(st->ep);
      }
    }
    st->ep = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (result.ok()) {
        ++counts.pulls_done;
        // Device pages are copied by the runner, after this.
        counts.bytes_received += static_cast<int64_t>(result->device != nullptr ? result->num_bytes() : st->bytes);
        counts.seconds += std::chrono::duration<double>(Clock::now() - st->start).count();
      } else {
        ++counts.pulls_failed;
      }
    }
    st->done(std::move(result));
  }

  // Ends the pull once it is complete, refused or broken; leaves it while pages are due.
  void Check(std::shared_ptr<PullState> st) {
    if (!st->fault.empty()) return End(st, DataLoss("KV transfer of room " + std::to_string(st->room) + ": " + st->fault));
    if (!st->has_meta_bytes || st->pending > 0) return;
    Result<RoomMeta> meta = DecodeMeta(st->meta_bytes, config.secret, st->room);
    if (!meta.ok()) return End(st, DataLoss(meta.status().message()));
    if (!meta->error.empty()) return End(st, Unavailable("the prefill server has no KV for this request: " + meta->error));
    const size_t n = meta->page_sizes.size();
    if (meta->device) {
      if (!st->pages.empty()) return End(st, DataLoss("KV transfer: pages sent with device pages"));
      return End(st, DeviceKv(st->room, std::move(meta).value()));
    }
    if (st->pages.size() > n) return End(st, DataLoss("KV transfer: more pages than the meta names"));
    if (st->pages.size() < n) return;
    for (size_t i = 0; i < n; ++i)
      if (st->page_arrived[i] == 0) return;
    const std::vector<Digest> digests = Sha256Pages(st->pages);
    for (size_t i = 0; i < n; ++i) {
      if (st->pages[i].size() != meta->page_sizes[i] || !DigestEquals(meta->page_digests[i], digests[i]))
        return End(st, DataLoss("KV transfer: page " + std::to_string(i) + " does not match its digest"));
    }
    TransferredKv kv;
    kv.fingerprint = std::move(meta->fingerprint);
    kv.prompt_ids = std::move(meta->prompt_ids);
    kv.num_tokens = meta->num_tokens;
    kv.num_cached_tokens = meta->num_cached_tokens;
    kv.first = std::move(meta->first);
    kv.pages = std::move(st->pages);
    End(st, std::move(kv));
  }

  // The KV of a device meta: the runner copies the pages over CUDA IPC and checks their
  // checksums; dropping the last reference releases them on the prefill server.
  TransferredKv DeviceKv(uint64_t room, RoomMeta meta) {
    auto pages = std::make_unique<DeviceKvPages>();
    pages->ipc_handle = std::move(meta.ipc_handle);
    pages->host = std::move(meta.ipc_host);
    pages->arena_bytes = meta.arena_bytes;
    pages->offsets = std::move(meta.page_offsets);
    pages->sizes = std::move(meta.page_sizes);
    pages->checksums = std::move(meta.page_checksums);
    TransferredKv kv;
    kv.fingerprint = std::move(meta.fingerprint);
    kv.prompt_ids = std::move(meta.prompt_ids);
    kv.num_tokens = meta.num_tokens;
    kv.num_cached_tokens = meta.num_cached_tokens;
    kv.first = std::move(meta.first);
    kv.device = std::shared_ptr<const DeviceKvPages>(pages.release(), [r = releases, room](const DeviceKvPages* p) {
      delete p;
      std::lock_guard<std::mutex> lock(r->mu);
      if (r->ucx == nullptr) return;
      r->rooms.push_back(room);
      r->ucx->Wake();
    });
    return kv;
  }

  // Sends the releases asked for, and closes the endpoints that sent one a while ago (a close
  // cancels what is still being sent).
  void SendReleases() {
    std::vector<uint64_t> rooms;
    {
      std::lock_guard<std::mutex> lock(releases->mu);
      std::swap(rooms, releases->rooms);
    }
    const Clock::time_point now = Clock::now();
    for (uint64_t room : rooms) {
      auto it = lent.find(room);
      if (it == lent.end()) continue;
      WireHeader h;
      h.kind = static_cast<uint16_t>(MessageKind::kRelease);
      h.room = room;
      const Digest mac = ReleaseMac(config.secret, room);
      ucx->Send(it->second, h, std::make_shared<const std::vector<uint8_t>>(mac.begin(), mac.end()), false);
      closing.push_back({it->second, now + std::chrono::seconds(1)});
      lent.erase(it);
    }
    for (size_t i = 0; i < closing.size();) {
      if (closing[i].at <= now) {
        CloseEp(closing[i].ep);
        closing[i] = closing.back();
        closing.pop_back();
      } else {
        ++i;
      }
    }
  }

  // An endpoint that failed: a pull on it ends; one kept for a release is closed.
  void Failed(ucp_ep_h ep) {
    for (auto it = pulls.begin(); it != pulls.end(); ++it) {
      if (it->second->ep != ep) continue;
      const std::shared_ptr<PullState> st = it->second;
      End(st, Unavailable("the prefill server's transfer connection failed"));
      return;
    }
    for (auto it = lent.begin(); it != lent.end(); ++it) {
      if (it->second != ep) continue;
      lent.erase(it);
      CloseEp(ep);
      return;
    }
    for (size_t i = 0; i < closing.size(); ++i) {
      if (closing[i].ep != ep) continue;
      closing.erase(closing.begin() + static_cast<std::ptrdiff_t>(i));
      CloseEp(ep);
      return;
    }
  }

  void Begin(const std::shared_ptr<PullState>& st) {
    if (pulls.count(st->room) != 0) {
      st->ended = true;
      std::lock_guard<std::mutex> lock(mu);
      ++counts.pulls_failed;
      st->done(InvalidArgument("room " + std::to_string(st->room) + " is already being pulled"));
      return;
    }
    pulls[st->room] = st;
    Result<SocketAddress> addr = Resolve(st->host, st->port);
    if (!addr.ok()) return End(st, addr.status());
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(addr->storage.data());
    p.sockaddr.addrlen = addr->length;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = OnEpError;
    p.err_handler.arg = this;
    const ucs_status_t s = ucp_ep_create(ucx->worker(), &p, &st->ep);
    if (s != UCS_OK) {
      st->ep = nullptr;
      return End(st, Unavailable("cannot reach the prefill server's transfer port " + st->host + ":" +
                                 std::to_string(st->port) + ": " + ucs_status_string(s)));
    }
    WireHeader h;
    h.kind = static_cast<uint16_t>(MessageKind::kPull);
    h.room = st->room;
    const Digest mac = PullMac(config.secret, st->room);
    if (!ucx->Send(st->ep, h, std::make_shared<const std::vector<uint8_t>>(mac.begin(), mac.end()), true))
      End(st, Unavailable("the KV pull request could not be sent"));
  }

  void Loop() {
    while (!stopping.load()) {
      ucx->ProgressAndWait(20);
      std::vector<std::shared_ptr<PullState>> batch;
      {
        std::lock_guard<std::mutex> lock(mu);
        std::swap(batch, submitted);
      }
      for (const auto& st : batch) Begin(st);
      std::vector<uint64_t> rooms;
      std::swap(rooms, touched);
      for (uint64_t room : rooms)
        if (auto it = pulls.find(room); it != pulls.end()) Check(it->second);
      std::vector<ucp_ep_h> gone;
      std::swap(gone, failed);
      for (ucp_ep_h ep : gone) Failed(ep);
      SendReleases();
      const Clock::time_point now = Clock::now();
      std::vector<std::shared_ptr<PullState>> late;
      for (const auto& [room, st] : pulls)
        if (st->deadline <= now) late.push_back(st);
      for (const auto& st : late) End(st, DeadlineExceeded("the KV transfer of room " + std::to_string(st->room) + " timed out"));
    }
    std::vector<std::shared_ptr<PullState>> left;
    for (const auto& [room, st] : pulls) left.push_back(st);
    for (const auto& st : left) End(st, Unavailable("the KV receiver is shutting down"));
    {
      std::lock_guard<std::mutex> lock(releases->mu);
      releases->ucx = nullptr;  // later releases are dropped: the rooms expire on the prefill server
    }
    for (const auto& [room, ep] : lent) CloseEp(ep);
    for (const Closing& c : closing) CloseEp(c.ep);
    lent.clear();
    closing.clear();
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& st : submitted) st->done(Unavailable("the KV receiver is shutting down"));
    submitted.clear();
  }
};

Result<std::unique_ptr<KvReceiver>> KvReceiver::Start(const KvReceiverConfig& config) {
  if (config.secret.empty()) return InvalidArgument("the KV transfer needs the deployment's shared secret");
  if (config.timeout_s <= 0) return InvalidArgument("the KV transfer timeout must be positive");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  PG_ASSIGN_OR_RETURN(impl->ucx, UcxWorker::Create());
  PG_RETURN_IF_ERROR(impl->ucx->SetHandler(MessageKind::kMeta, &Impl::OnMessage, impl.get()));
  PG_RETURN_IF_ERROR(impl->ucx->SetHandler(MessageKind::kPage, &Impl::OnMessage, impl.get()));
  impl->releases->ucx = impl->ucx.get();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<KvReceiver>(new KvReceiver(std::move(impl)));
}

KvReceiver::KvReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvReceiver::~KvReceiver() {
  impl_->stopping = true;
  impl_->ucx->Wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void KvReceiver::Pull(std::string host, uint16_t port, uint64_t room, Done done) {
  auto st = std::make_shared<Impl::PullState>();
  st->room = room;
  st->host = std::move(host);
  st->port = port;
  st->done = std::move(done);
  st->start = Clock::now();
  st->deadline = st->start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(impl_->config.timeout_s));
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    ++impl_->counts.pulls_started;
    impl_->submitted.push_back(std::move(st));
  }
  impl_->ucx->Wake();
}

KvReceiverStats KvReceiver::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->counts;
}

}  // namespace peregrine::disaggregation
