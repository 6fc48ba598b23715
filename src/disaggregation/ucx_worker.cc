#include "disaggregation/ucx_worker.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace peregrine::disaggregation {

namespace {

struct SendContext {
  WireHeader header;
  SharedBytes data;
};

void SendDone(void* request, ucs_status_t /*status*/, void* user_data) {
  delete static_cast<SendContext*>(user_data);
  ucp_request_free(request);
}

std::string UcxError(const char* what, ucs_status_t s) { return std::string(what) + ": " + ucs_status_string(s); }

}  // namespace

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create() {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  ucp_config_t* config = nullptr;
  // A listener must bind its port again at once after a restart, even while connections it
  // closed itself sit in TIME_WAIT: SO_REUSEADDR. UCX reads its connection manager's options
  // from the environment only (ucp_config_modify does not reach them), so the default is set
  // there, once, before the first worker's threads exist; a user's setting wins.
  static std::once_flag reuse;
  std::call_once(reuse, [] { setenv("UCX_TCP_CM_REUSEADDR", "y", 0); });
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return Unavailable(UcxError("UCX configuration", s));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (s != UCS_OK) return Unavailable(UcxError("UCX initialisation", s));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (s != UCS_OK) return Unavailable(UcxError("UCX worker", s));
  s = ucp_worker_get_efd(w->worker_, &w->ucx_fd_);
  if (s != UCS_OK) return Unavailable(UcxError("UCX worker events", s));
  w->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->wake_fd_ < 0) return Unavailable(std::string("eventfd: ") + std::strerror(errno));
  return w;
}

UcxWorker::~UcxWorker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status UcxWorker::SetHandler(MessageKind kind, ucp_am_recv_callback_t callback, void* arg) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = static_cast<unsigned>(kind);
  p.cb = callback;
  p.arg = arg;
  const ucs_status_t s = ucp_worker_set_am_recv_handler(worker_, &p);
  return s == UCS_OK ? Status::Ok() : Unavailable(UcxError("UCX active-message handler", s));
}

void UcxWorker::ProgressAndWait(int timeout_ms) {
  while (ucp_worker_progress(worker_) != 0) {
  }
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // more events already: progress again
  pollfd fds[2] = {{ucx_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  poll(fds, 2, timeout_ms);
  uint64_t v = 0;
  if ((fds[1].revents & POLLIN) != 0 && read(wake_fd_, &v, sizeof v) < 0) v = 0;
}

void UcxWorker::Wake() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) < 0) return;  // the counter is full: a wake is pending anyway
}

bool UcxWorker::Send(ucp_ep_h ep, const WireHeader& header, SharedBytes data, bool reply) {
  auto* ctx = new SendContext{header, std::move(data)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = SendDone;
  p.user_data = ctx;
  p.flags = reply ? UCP_AM_SEND_FLAG_REPLY : 0;
  const void* bytes = ctx->data != nullptr ? ctx->data->data() : nullptr;
  const size_t size = ctx->data != nullptr ? ctx->data->size() : 0;
  const ucs_status_ptr_t r =
      ucp_am_send_nbx(ep, header.kind, &ctx->header, sizeof ctx->header, bytes, size, &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    delete ctx;
    return r == nullptr;
  }
  return true;  // SendDone frees the context
}

void UcxWorker::Close(ucp_ep_h ep) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(r);
  }
  // UCX (1.13 through 1.22) keeps the events its async thread could not deliver while
  // the worker was busy in a queue of socket numbers, and does not purge that queue when a
  // socket's handler goes. Closing the endpoint freed its socket's number; a second worker
  // in the same process (the tests' sender and receiver) may take it for a new socket, and
  // this worker's next progress would then hand that worker's handler an event of its own
  // and abort (async.c: "handler->async == async"). Progress once now, while the number is
  // most likely still free: UCX drains the queue at the end of each progress call.
  ucp_worker_progress(worker_);
}

Result<SocketAddress> Resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) return Unavailable("cannot resolve " + host + ": " + gai_strerror(rc));
  SocketAddress a;
  a.storage.assign(reinterpret_cast<const uint8_t*>(res->ai_addr),
                   reinterpret_cast<const uint8_t*>(res->ai_addr) + res->ai_addrlen);
  a.length = static_cast<uint32_t>(res->ai_addrlen);
  freeaddrinfo(res);
  return a;
}

}  // namespace peregrine::disaggregation
