#include "disaggregation/kv_sender.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/log.h"
#include "disaggregation/transfer_wire.h"
#include "disaggregation/ucx_worker.h"

namespace peregrine::disaggregation {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kGoneRemembered = 4096;  // rooms whose late pulls hear why they are gone
constexpr double kLentExpiries = 10;       // device pages pulled but not released: expiries kept

uint16_t PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

}  // namespace

struct KvSender::Impl {
  struct Room {
    std::string error;        // non-empty: the request has no KV
    SharedBytes meta;         // signed meta (error rooms: encoded per pull)
    std::vector<SharedBytes> pages;
    std::shared_ptr<const DeviceKvPages> device;  // CUDA IPC: the pages stay where they are
    Clock::time_point deadline;
    uint64_t bytes = 0;  // host bytes held
  };
  struct Lent {  // device pages a decode server is copying
    std::shared_ptr<const DeviceKvPages> pages;
    Clock::time_point deadline;
  };
  struct Pull {
    ucp_ep_h ep = nullptr;
    uint64_t room = 0;
    Clock::time_point deadline;
  };

  KvSenderConfig config;
  std::unique_ptr<UcxWorker> ucx;
  ucp_listener_h listener = nullptr;
  uint16_t bound_port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};

  // Shared with Publish and stats.
  mutable std::mutex mu;
  std::vector<std::pair<uint64_t, Result<TransferredKv>>> published;
  KvSenderStats counts;

  // The thread's (and UCX callbacks', which run inside its progress calls).
  std::unordered_map<uint64_t, Room> rooms;
  std::deque<uint64_t> room_order;  // publication order (may name rooms already gone)
  uint64_t held_bytes = 0;          // pages of the rooms in `rooms`
  std::vector<Pull> arrived;  // pulls received in callbacks, answered after progress
  std::vector<Pull> waiting;  // pulls for rooms not published yet
  std::unordered_map<uint64_t, Lent> lent;
  std::vector<uint64_t> released;  // kRelease received in callbacks
  std::deque<uint64_t> gone_order;
  std::unordered_map<uint64_t, std::string> gone;  // room -> why a pull finds nothing
  std::vector<ucp_conn_request_h> connections;
  std::unordered_set<ucp_ep_h> eps;
  std::vector<ucp_ep_h> failed;

  static void OnConnection(ucp_conn_request_h request, void* arg) {
    static_cast<Impl*>(arg)->connections.push_back(request);
  }
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) { static_cast<Impl*>(arg)->failed.push_back(ep); }
  static ucs_status_t OnPull(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Impl*>(arg);
    const Result<WireHeader> h = ParseHeader({static_cast<const uint8_t*>(header), header_length});
    const bool has_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0;
    const bool inline_data = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0;
    const bool ok = h.ok() && h->kind == static_cast<uint16_t>(MessageKind::kPull) && has_ep && inline_data &&
                    DigestEquals(PullMac(self->config.secret, h->room), {static_cast<const uint8_t*>(data), length});
    if (!ok) {
      std::lock_guard<std::mutex> lock(self->mu);
      ++self->counts.pulls_refused;
      return UCS_OK;  // unanswered: the peer learns nothing
    }
    self->arrived.push_back({param->reply_ep, h->room, Clock::now() + Seconds(self->config.expiry_s)});
    return UCS_OK;
  }
  static ucs_status_t OnRelease(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Impl*>(arg);
    const Result<WireHeader> h = ParseHeader({static_cast<const uint8_t*>(header), header_length});
    const bool inline_data = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0;
    if (h.ok() && h->kind == static_cast<uint16_t>(MessageKind::kRelease) && inline_data &&
        DigestEquals(ReleaseMac(self->config.secret, h->room), {static_cast<const uint8_t*>(data), length})) {
      self->released.push_back(h->room);
    } else {
      std::lock_guard<std::mutex> lock(self->mu);
      ++self->counts.pulls_refused;
    }
    return UCS_OK;
  }
  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void SendError(ucp_ep_h ep, uint64_t room, const std::string& error) {
    RoomMeta m;
    m.error = error;
    WireHeader h;
    h.kind = static_cast<uint16_t>(MessageKind::kMeta);
    h.room = room;
    ucx->Send(ep, h, std::make_shared<const std::vector<uint8_t>>(EncodeMeta(m, config.secret, room)), false);
  }

  void Forget(uint64_t room, std::string why) {
    if (gone.emplace(room, std::move(why)).second) gone_order.push_back(room);
    if (gone_order.size() > kGoneRemembered) {
      gone.erase(gone_order.front());
      gone_order.pop_front();
    }
  }

  void Answer(const Pull& p) {
    auto it = rooms.find(p.room);
    if (it == rooms.end()) {
      if (auto g = gone.find(p.room); g != gone.end()) {
        SendError(p.ep, p.room, g->second);
      } else {
        waiting.push_back(p);
      }
      return;
    }
    Room room = std::move(it->second);
    held_bytes -= room.bytes;
    rooms.erase(it);
    Forget(p.room, "the room was already pulled");
    if (!room.error.empty()) {
      SendError(p.ep, p.room, room.error);
      return;
    }
    WireHeader h;
    h.kind = static_cast<uint16_t>(MessageKind::kMeta);
    h.room = p.room;
    ucx->Send(p.ep, h, room.meta, false);
    if (room.device != nullptr) {
      // The decode server copies the pages itself and says when it is done (or they expire).
      const auto bytes = static_cast<int64_t>(room.device->bytes());
      // Longer than a room waits for its pull: the decode server may queue the request
      // before it copies (a slab freed early is caught by the checksum, but costs a recompute).
      lent[p.room] = {std::move(room.device), Clock::now() + Seconds(kLentExpiries * config.expiry_s)};
      std::lock_guard<std::mutex> lock(mu);
      ++counts.rooms_sent;
      counts.bytes_sent += bytes;
      return;
    }
    int64_t bytes = 0;
    h.kind = static_cast<uint16_t>(MessageKind::kPage);
    for (size_t i = 0; i < room.pages.size(); ++i) {
      h.index = static_cast<uint32_t>(i);
      bytes += static_cast<int64_t>(room.pages[i]->size());
      ucx->Send(p.ep, h, room.pages[i], false);
    }
    std::lock_guard<std::mutex> lock(mu);
    ++counts.rooms_sent;
    counts.bytes_sent += bytes;
  }

  void TakePublished() {
    std::vector<std::pair<uint64_t, Result<TransferredKv>>> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      std::swap(batch, published);
    }
    for (auto& [id, kv] : batch) {
      Room room;
      room.deadline = Clock::now() + Seconds(config.expiry_s);
      if (!kv.ok()) {
        room.error = kv.status().message();
      } else if (lent.count(id) != 0) {
        // A room id is one request's: a second publish while the first one's device pages are
        // still being copied would make their releases ambiguous.
        room.error = "the room id is still in use by an earlier request";
      } else {
        RoomMeta meta = MetaOf(*kv);
        room.device = std::move(kv->device);
        if (config.fault == "corrupt" && !meta.page_checksums.empty()) meta.page_checksums.back() ^= 1;
        for (std::vector<uint8_t>& page : kv->pages) {
          if (config.fault == "corrupt" && &page == &kv->pages.back() && !page.empty()) page.back() ^= 0x5a;
          room.pages.push_back(std::make_shared<const std::vector<uint8_t>>(std::move(page)));
        }
        room.meta = std::make_shared<const std::vector<uint8_t>>(EncodeMeta(meta, config.secret, id));
        for (const SharedBytes& p : room.pages) room.bytes += p->size();
      }
      // Past the cap the oldest rooms go first: their decode servers recompute (or fail).
      while (held_bytes + room.bytes > config.max_held_bytes && !room_order.empty()) {
        const uint64_t oldest = room_order.front();
        room_order.pop_front();
        auto old = rooms.find(oldest);
        if (old == rooms.end()) continue;
        held_bytes -= old->second.bytes;
        rooms.erase(old);
        Forget(oldest, "the prefill server dropped the room: it held too much KV for pulls that did not come");
        std::lock_guard<std::mutex> lock(mu);
        ++counts.rooms_dropped;
      }
      if (auto prior = rooms.find(id); prior != rooms.end()) held_bytes -= prior->second.bytes;
      held_bytes += room.bytes;
      room_order.push_back(id);
      rooms[id] = std::move(room);
      // Pulls that came first are answered now.
      for (size_t i = 0; i < waiting.size();) {
        if (waiting[i].room == id) {
          const Pull p = waiting[i];
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
          Answer(p);
        } else {
          ++i;
        }
      }
    }
  }

  void Accept() {
    for (ucp_conn_request_h request : connections) {
      ucp_ep_params_t p{};
      p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                     UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      p.conn_request = request;
      p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      p.err_handler.cb = OnEpError;
      p.err_handler.arg = this;
      ucp_ep_h ep = nullptr;
      if (ucp_ep_create(ucx->worker(), &p, &ep) == UCS_OK) eps.insert(ep);
    }
    connections.clear();
  }

  void DropFailed() {
    std::vector<ucp_ep_h> gone;
    std::swap(gone, failed);
    for (ucp_ep_h ep : gone) {
      std::erase_if(waiting, [&](const Pull& p) { return p.ep == ep; });
      std::erase_if(arrived, [&](const Pull& p) { return p.ep == ep; });
      if (eps.erase(ep) != 0) ucx->Close(ep);
    }
  }

  void Release() {
    for (uint64_t room : released) {
      if (lent.erase(room) == 0) continue;
      std::lock_guard<std::mutex> lock(mu);
      ++counts.rooms_released;
    }
    released.clear();
  }

  void Expire() {
    const Clock::time_point now = Clock::now();
    std::erase_if(lent, [&](const auto& entry) { return entry.second.deadline <= now; });
    while (!room_order.empty() && rooms.count(room_order.front()) == 0) room_order.pop_front();
    for (auto it = rooms.begin(); it != rooms.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      const uint64_t id = it->first;
      held_bytes -= it->second.bytes;
      it = rooms.erase(it);
      Forget(id, "the room expired before it was pulled");
      std::lock_guard<std::mutex> lock(mu);
      ++counts.rooms_expired;
    }
    for (size_t i = 0; i < waiting.size();) {
      if (waiting[i].deadline <= now) {
        SendError(waiting[i].ep, waiting[i].room, "no KV was published for this room in time");
        waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  void Loop() {
    while (!stopping.load()) {
      ucx->ProgressAndWait(50);
      Accept();
      TakePublished();
      std::vector<Pull> pulls;
      std::swap(pulls, arrived);
      for (const Pull& p : pulls) Answer(p);
      Release();
      DropFailed();
      Expire();
    }
    for (ucp_ep_h ep : eps) ucx->Close(ep);
    eps.clear();
  }
};

Result<std::unique_ptr<KvSender>> KvSender::Start(const KvSenderConfig& config) {
  if (config.secret.empty()) return InvalidArgument("the KV transfer needs the deployment's shared secret");
  if (config.expiry_s <= 0) return InvalidArgument("the KV transfer expiry must be positive");
  if (config.max_held_bytes == 0) return InvalidArgument("the KV transfer needs room for at least one request's KV");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  PG_ASSIGN_OR_RETURN(impl->ucx, UcxWorker::Create());
  PG_RETURN_IF_ERROR(impl->ucx->SetHandler(MessageKind::kPull, &Impl::OnPull, impl.get()));
  PG_RETURN_IF_ERROR(impl->ucx->SetHandler(MessageKind::kRelease, &Impl::OnRelease, impl.get()));
  PG_ASSIGN_OR_RETURN(const SocketAddress addr, Resolve(config.host, config.port));
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(addr.storage.data());
  lp.sockaddr.addrlen = addr.length;
  lp.conn_handler.cb = &Impl::OnConnection;
  lp.conn_handler.arg = impl.get();
  const ucs_status_t s = ucp_listener_create(impl->ucx->worker(), &lp, &impl->listener);
  if (s != UCS_OK)
    return Unavailable("cannot bind the KV transfer port " + config.host + ":" + std::to_string(config.port) + ": " +
                       ucs_status_string(s));
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (ucp_listener_query(impl->listener, &attr) == UCS_OK) impl->bound_port = PortOf(attr.sockaddr);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<KvSender>(new KvSender(std::move(impl)));
}

KvSender::KvSender(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvSender::~KvSender() {
  impl_->stopping = true;
  impl_->ucx->Wake();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->listener != nullptr) ucp_listener_destroy(impl_->listener);
}

uint16_t KvSender::port() const { return impl_->bound_port; }

void KvSender::Publish(uint64_t room, Result<TransferredKv> kv) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    ++impl_->counts.rooms_published;
    if (impl_->config.fault == "drop") return;
    impl_->published.emplace_back(room, std::move(kv));
  }
  impl_->ucx->Wake();
}

KvSenderStats KvSender::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->counts;
}

}  // namespace peregrine::disaggregation
