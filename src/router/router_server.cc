#include "router/router_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <utility>  // before asio/awaitable.hpp, which uses std::exchange without it (1.74)

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "bench_client/base_url.h"
#include "bench_client/exposition_scan.h"
#include "router/pd_request.h"
#include "router/routing_text.h"
#include "router/worker_pool.h"

namespace peregrine::router {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using net::awaitable;

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr auto kCheckTimeout = std::chrono::seconds(3);
// The status a relayed request is counted under when its client closed the connection first
// (nginx's 499): not a failure of the worker.
constexpr int kClientClosed = 499;

std::chrono::milliseconds Ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

// Constant time in the key's length.
bool IsBearer(std::string_view header, std::string_view key) {
  if (header.size() < 7) return false;
  std::string scheme(header.substr(0, 7));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer ") return false;
  const std::string_view given = header.substr(7);
  if (given.size() != key.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned>(given[i] ^ key[i]);
  return diff == 0;
}

http::response<http::string_body> JsonError(http::status status, std::string_view message, std::string_view type,
                                            unsigned version, bool keep_alive) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::server, "peregrine-router");
  res.body() = "{\"error\":{\"message\":\"" + std::string(message) + "\",\"type\":\"" + std::string(type) +
               "\",\"param\":null,\"code\":" + std::to_string(static_cast<int>(status)) + "}}";
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

// The worker's running + waiting requests from its Prometheus text (any metric prefix).
std::optional<int64_t> QueuedFromMetrics(std::string_view text) {
  int64_t total = 0;
  bool found = false;
  bench_client::ForEachSample(text, [&](std::string_view name, double v) {
    if (!name.ends_with(":num_requests_running") && !name.ends_with(":num_requests_waiting")) return;
    total += static_cast<int64_t>(v);
    found = true;
  });
  if (!found) return std::nullopt;
  return total;
}

// Every worker's name: the decode (or only) workers, then the prefill workers.
std::vector<std::string> WorkerNames(const RouterConfig& c) {
  std::vector<std::string> names = c.worker_urls;
  for (const RouterConfig::PrefillWorker& p : c.prefill_workers) names.push_back(p.url);
  return names;
}

// splitmix64: rooms from a random start, distinct for 2^64 requests.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

struct RouterServer::Impl {
  Impl(const RouterConfig& c, std::vector<bench_client::BaseUrl> u)
      : config(c),
        urls(std::move(u)),
        pool(WorkerNames(c), c.policy, c.prefix_keys_per_worker, c.unhealthy_after),
        num_decode(c.worker_urls.size()),
        ioc(c.num_threads),
        acceptor(ioc) {
    for (size_t i = num_decode; i < urls.size(); ++i) prefill_indices.push_back(static_cast<int>(i));
    for (size_t i = 0; i < num_decode; ++i) decode_indices.push_back(static_cast<int>(i));
    room_seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }

  // The forwarded copy of `req` for worker `w`, with `body`.
  http::request<http::string_body> Forwarded(const http::request<http::string_body>& req, int w, std::string body) const;
  uint64_t NextRoom() { return Mix(room_seed + next_room.fetch_add(1)) & 0x7fffffffffffffffULL; }

  awaitable<void> Accept();
  awaitable<void> ServeClient(tcp::socket socket);
  // A relayed request's upstream connections, closed when its client goes away first (the
  // workers then abort the request); touched on the client's strand, the prefill stream
  // through its own.
  struct Relaying {
    bool finished = false;
    std::atomic<bool> client_gone{false};  // also read by the prefill exchange
    beast::tcp_stream* upstream = nullptr;  // the worker answering the client, while connected
    std::shared_ptr<beast::tcp_stream> prefill;
  };
  // Sends the request to a worker and relays the answer; false: the client connection must close.
  awaitable<bool> Relay(beast::tcp_stream& client, const http::request<http::string_body>& req);
  awaitable<bool> RelayTo(beast::tcp_stream& client, const http::request<http::string_body>& req,
                          const std::shared_ptr<Relaying>& st);
  // Until the relay ends: a client that closes its connection closes the upstream ones.
  awaitable<void> WatchClient(tcp::socket& socket, std::shared_ptr<Relaying> st);
  // PD mode: sends the prefill worker its copy of a request (on st->prefill) and
  // drops the answer.
  awaitable<void> Prefill(int w, std::shared_ptr<Relaying> st, http::request<http::string_body> fwd,
                          std::vector<uint64_t> keys);
  // One plain GET to worker i: (status, body), or nullopt when it could not be done.
  awaitable<std::optional<std::pair<int, std::string>>> Get(size_t i, std::string target);
  awaitable<void> Check(size_t i);

  RouterConfig config;
  std::vector<bench_client::BaseUrl> urls;  // decode (or only) workers, then prefill workers
  WorkerPool pool;
  size_t num_decode;
  std::vector<int> prefill_indices, decode_indices;  // each role's Acquire excludes the other's
  uint64_t room_seed = 0;
  std::atomic<uint64_t> next_room{0};
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
};

awaitable<void> RouterServer::Impl::Accept() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(net::make_strand(ioc), net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (stopping.load() || ec == net::error::operation_aborted) co_return;
      continue;
    }
    auto exec = socket.get_executor();
    net::co_spawn(exec, ServeClient(std::move(socket)), net::detached);
  }
}

awaitable<void> RouterServer::Impl::ServeClient(tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<uint64_t>(config.max_body_bytes));
    client.expires_after(kIdleTimeout);
    beast::error_code ec;
    co_await http::async_read(client, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == http::error::body_limit) {
        auto res = JsonError(http::status::payload_too_large, "the request body is too large", "invalid_request_error",
                             11, false);
        co_await http::async_write(client, res, net::redirect_error(net::use_awaitable, ec));
      }
      break;
    }
    http::request<http::string_body> req = parser.release();
    const bool keep_alive = req.keep_alive();
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    bool keep = keep_alive;
    if (path == "/health" || path == "/metrics") {
      http::response<http::string_body> res{http::status::ok, req.version()};
      res.set(http::field::server, "peregrine-router");
      if (path == "/health") {
        if (!pool.any_healthy()) res.result(http::status::service_unavailable);
      } else {
        res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res.body() = pool.RenderMetrics(config.metrics_prefix);
      }
      res.keep_alive(keep_alive);
      res.prepare_payload();
      co_await http::async_write(client, res, net::redirect_error(net::use_awaitable, ec));
      keep = keep && !ec;
    } else if (!config.api_key.empty() &&
               !IsBearer(std::string_view(req[http::field::authorization].data(), req[http::field::authorization].size()),
                         config.api_key)) {
      auto res = JsonError(http::status::unauthorized, "invalid or missing API key", "authentication_error",
                           req.version(), keep_alive);
      co_await http::async_write(client, res, net::redirect_error(net::use_awaitable, ec));
      keep = keep && !ec;
    } else if (path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize" || path == "/version") {
      keep = co_await Relay(client, req) && keep_alive;
    } else {
      auto res = JsonError(http::status::not_found, "no such route", "invalid_request_error", req.version(), keep_alive);
      co_await http::async_write(client, res, net::redirect_error(net::use_awaitable, ec));
      keep = keep && !ec;
    }
    if (!keep || stopping.load()) break;
  }
  beast::error_code ignored;
  client.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

http::request<http::string_body> RouterServer::Impl::Forwarded(const http::request<http::string_body>& req, int w,
                                                               std::string body) const {
  const bench_client::BaseUrl& url = urls[static_cast<size_t>(w)];
  http::request<http::string_body> fwd{req.method(), url.path_prefix + std::string(req.target()), 11};
  fwd.set(http::field::host, bench_client::HostHeader(url));
  for (http::field f : {http::field::content_type, http::field::accept}) {
    if (req.count(f) != 0) fwd.set(f, req[f]);
  }
  if (req.count("x-request-id") != 0) fwd.set("x-request-id", req["x-request-id"]);
  if (!config.worker_api_key.empty()) fwd.set(http::field::authorization, "Bearer " + config.worker_api_key);
  else if (req.count(http::field::authorization) != 0) fwd.set(http::field::authorization, req[http::field::authorization]);
  fwd.body() = std::move(body);
  fwd.keep_alive(false);
  fwd.prepare_payload();
  return fwd;
}

awaitable<void> RouterServer::Impl::Prefill(int w, std::shared_ptr<Relaying> st, http::request<http::string_body> fwd,
                                            std::vector<uint64_t> keys) {
  const std::shared_ptr<beast::tcp_stream> stream = st->prefill;
  const bench_client::BaseUrl& url = urls[static_cast<size_t>(w)];
  auto exec = co_await net::this_coro::executor;
  beast::error_code ec;
  tcp::resolver resolver(exec);
  auto endpoints = co_await resolver.async_resolve(url.host, url.port, net::redirect_error(net::use_awaitable, ec));
  beast::tcp_stream& up = *stream;
  if (!ec) {
    up.expires_after(Ms(config.connect_timeout_s));
    co_await up.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
  }
  if (!ec) {
    up.expires_after(Ms(config.request_timeout_s));
    co_await http::async_write(up, fwd, net::redirect_error(net::use_awaitable, ec));
  }
  http::response_parser<http::string_body> rp;
  rp.body_limit(static_cast<uint64_t>(config.max_body_bytes));
  beast::flat_buffer buffer;
  if (!ec) co_await http::async_read(up, buffer, rp, net::redirect_error(net::use_awaitable, ec));
  // A prefill worker that fails leaves the decode worker to its failure policy.
  pool.Release(w, !ec ? rp.get().result_int() : st->client_gone ? kClientClosed : 0, keys);
}

awaitable<void> RouterServer::Impl::WatchClient(tcp::socket& socket, std::shared_ptr<Relaying> st) {
  for (;;) {
    beast::error_code ec;
    co_await socket.async_wait(tcp::socket::wait_read, net::redirect_error(net::use_awaitable, ec));
    if (st->finished || ec) co_return;  // the relay ended (and cancelled this wait)
    // Readiness can be stale: only a peek tells a closed connection (0) from more bytes (a
    // pipelined request: not gone) and from nothing yet (wait again).
    char byte = 0;
    const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) co_return;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    break;  // end of stream or a reset
  }
  st->client_gone = true;
  beast::error_code ignored;
  if (st->upstream != nullptr) st->upstream->socket().close(ignored);
  if (st->prefill != nullptr) {
    net::post(st->prefill->get_executor(), [p = st->prefill] {
      beast::error_code e;
      p->socket().close(e);
    });
  }
}

awaitable<bool> RouterServer::Impl::Relay(beast::tcp_stream& client, const http::request<http::string_body>& req) {
  auto st = std::make_shared<Relaying>();
  net::co_spawn(co_await net::this_coro::executor, WatchClient(client.socket(), st), net::detached);
  const bool keep = co_await RelayTo(client, req, st);
  st->finished = true;
  beast::error_code ignored;
  client.socket().cancel(ignored);
  co_return keep && !st->client_gone;
}

awaitable<bool> RouterServer::Impl::RelayTo(beast::tcp_stream& client, const http::request<http::string_body>& req,
                                            const std::shared_ptr<Relaying>& st) {
  const bool is_post = req.method() == http::verb::post;
  const std::vector<uint64_t> keys = PrefixKeys(is_post ? RoutingText(req.body()) : std::string());
  std::vector<int> tried = prefill_indices;  // a request is relayed to a decode (or plain) worker
  auto exec = co_await net::this_coro::executor;
  beast::error_code ec;
  // PD: the prefill worker gets its copy now; the decode workers below get theirs.
  std::string body = req.body();
  const std::string_view target(req.target().data(), req.target().size());
  std::optional<nlohmann::json> pd_body;
  if (!prefill_indices.empty() && is_post && IsPdRoute(target.substr(0, target.find('?')))) pd_body = ParsePdBody(body);
  // With no prefill worker left the decode worker serves the request whole.
  const int p = pd_body ? pool.Acquire(keys, decode_indices) : -1;
  if (p >= 0) {
    const RouterConfig::PrefillWorker& pw = config.prefill_workers[static_cast<size_t>(p) - num_decode];
    PdBodies split = SplitForPd(std::move(*pd_body), urls[static_cast<size_t>(p)].host, pw.bootstrap_port, NextRoom());
    st->prefill = std::make_shared<beast::tcp_stream>(net::make_strand(ioc));
    net::co_spawn(st->prefill->get_executor(), Prefill(p, st, Forwarded(req, p, std::move(split.prefill)), keys),
                  net::detached);
    body = std::move(split.decode);
  }
  for (int attempt = 0; attempt <= config.max_retries; ++attempt) {
    const int w = pool.Acquire(keys, tried);
    if (w < 0) break;
    tried.push_back(w);
    if (attempt > 0) pool.CountRetry();
    const bench_client::BaseUrl& url = urls[static_cast<size_t>(w)];
    // Connect, send, and read the answer's header: any failure so far goes to another worker.
    tcp::resolver resolver(exec);
    auto endpoints = co_await resolver.async_resolve(url.host, url.port, net::redirect_error(net::use_awaitable, ec));
    beast::tcp_stream up(exec);
    st->upstream = &up;
    struct Forget {
      Relaying* st;
      ~Forget() { st->upstream = nullptr; }
    } forget{st.get()};
    if (!ec) {
      up.expires_after(Ms(config.connect_timeout_s));
      co_await up.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
    }
    if (st->client_gone) {  // nobody to answer: not the worker's failure
      pool.Release(w, kClientClosed, keys);
      co_return false;
    }
    if (ec) {
      pool.Release(w, 0, keys);
      continue;
    }
    http::request<http::string_body> fwd = Forwarded(req, w, body);
    up.expires_after(Ms(config.request_timeout_s));
    co_await http::async_write(up, fwd, net::redirect_error(net::use_awaitable, ec));
    http::response_parser<http::buffer_body> rp;
    rp.body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::flat_buffer up_buffer;
    if (!ec) co_await http::async_read_header(up, up_buffer, rp, net::redirect_error(net::use_awaitable, ec));
    if (st->client_gone) {
      pool.Release(w, kClientClosed, keys);
      co_return false;
    }
    if (ec) {
      pool.Release(w, 0, keys);
      continue;
    }
    const int status = rp.get().result_int();
    if (status >= 500 && status != 501 && attempt < config.max_retries) {
      pool.Release(w, status, keys);  // answered, but not served: try another worker
      continue;
    }

    // Relay: the header, then the body as it arrives. No retry from here on.
    http::response<http::buffer_body> res{rp.get().result(), req.version()};
    for (const auto& field : rp.get()) {
      const http::field f = field.name();
      if (f == http::field::content_length || f == http::field::transfer_encoding || f == http::field::connection ||
          f == http::field::server || f == http::field::date)
        continue;
      res.set(field.name_string(), field.value());
    }
    res.set(http::field::server, "peregrine-router");
    res.keep_alive(req.keep_alive());
    const bool is_sse = rp.get()[http::field::content_type].starts_with("text/event-stream");
    if (rp.content_length()) res.content_length(*rp.content_length());
    else res.chunked(true);
    http::response_serializer<http::buffer_body> sr{res};
    client.expires_never();
    co_await http::async_write_header(client, sr, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      pool.Release(w, status, keys);
      co_return false;
    }
    char data[16384];
    bool upstream_failed = false;
    while (!rp.is_done()) {
      rp.get().body().data = data;
      rp.get().body().size = sizeof(data);
      co_await http::async_read_some(up, up_buffer, rp, net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        upstream_failed = true;
        break;
      }
      const size_t n = sizeof(data) - rp.get().body().size;
      if (n == 0) continue;
      res.body().data = data;
      res.body().size = n;
      res.body().more = true;
      co_await http::async_write(client, sr, net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {  // the client went away: dropping `up` aborts the worker's request
        pool.Release(w, status, keys);
        co_return false;
      }
    }
    if (upstream_failed && st->client_gone) {
      pool.Release(w, kClientClosed, keys);
      co_return false;
    }
    if (upstream_failed && !(is_sse && res.chunked())) {
      pool.Release(w, 0, keys);
      co_return false;  // a truncated body: the client sees the connection close
    }
    std::string tail;
    if (upstream_failed) {
      tail = "data: {\"error\":{\"message\":\"the worker failed mid-stream\",\"type\":\"server_error\",\"param\":null,"
             "\"code\":502}}\n\ndata: [DONE]\n\n";
      res.body().data = tail.data();
      res.body().size = tail.size();
      res.body().more = true;
      co_await http::async_write(client, sr, net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
    }
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = false;
    if (!ec) co_await http::async_write(client, sr, net::redirect_error(net::use_awaitable, ec));
    pool.Release(w, upstream_failed ? 0 : status, keys);
    co_return !ec && !upstream_failed;
  }
  pool.CountUnroutable();
  auto res = JsonError(http::status::service_unavailable, "no worker could take the request", "service_unavailable",
                       req.version(), req.keep_alive());
  co_await http::async_write(client, res, net::redirect_error(net::use_awaitable, ec));
  co_return !ec;
}

awaitable<std::optional<std::pair<int, std::string>>> RouterServer::Impl::Get(size_t i, std::string target) {
  const bench_client::BaseUrl& url = urls[i];
  auto exec = co_await net::this_coro::executor;
  beast::error_code ec;
  tcp::resolver resolver(exec);
  auto endpoints = co_await resolver.async_resolve(url.host, url.port, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  beast::tcp_stream up(exec);
  up.expires_after(kCheckTimeout);
  co_await up.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  http::request<http::empty_body> get{http::verb::get, url.path_prefix + target, 11};
  get.set(http::field::host, bench_client::HostHeader(url));
  get.keep_alive(false);
  co_await http::async_write(up, get, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  co_await http::async_read(up, buffer, res, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  co_return std::make_pair(res.result_int(), std::move(res.body()));
}

awaitable<void> RouterServer::Impl::Check(size_t i) {
  net::steady_timer timer(co_await net::this_coro::executor);
  while (!stopping.load()) {
    const auto health = co_await Get(i, "/health");
    const bool ok = health.has_value() && health->first == 200;
    std::optional<int64_t> queued;
    if (ok) {
      if (const auto metrics = co_await Get(i, "/metrics"); metrics.has_value() && metrics->first == 200)
        queued = QueuedFromMetrics(metrics->second);
    }
    pool.ReportHealth(static_cast<int>(i), ok, queued);
    timer.expires_after(Ms(config.health_interval_s));
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

Result<std::unique_ptr<RouterServer>> RouterServer::Start(const RouterConfig& config) {
  if (config.worker_urls.empty()) return InvalidArgument("the router needs at least one --worker-urls (or --decode) entry");
  if (config.num_threads < 1 || config.max_retries < 0 || !(config.health_interval_s > 0) ||
      !(config.connect_timeout_s > 0) || !(config.request_timeout_s > 0))
    return InvalidArgument("router threads, retries, intervals and timeouts must be positive");
  std::vector<bench_client::BaseUrl> urls;
  for (const std::string& u : config.worker_urls) {
    Result<bench_client::BaseUrl> url = bench_client::ParseBaseUrl(u);
    if (!url.ok()) return InvalidArgument("bad worker URL '" + u + "': " + url.status().message());
    urls.push_back(*url);
  }
  for (const RouterConfig::PrefillWorker& p : config.prefill_workers) {
    Result<bench_client::BaseUrl> url = bench_client::ParseBaseUrl(p.url);
    if (!url.ok()) return InvalidArgument("bad prefill worker URL '" + p.url + "': " + url.status().message());
    if (p.bootstrap_port == 0) return InvalidArgument("prefill worker '" + p.url + "' needs its bootstrap port");
    urls.push_back(*url);
  }
  auto impl = std::make_unique<Impl>(config, std::move(urls));
  beast::error_code ec;
  const auto address = net::ip::make_address(config.host, ec);
  if (ec) return InvalidArgument("bad --host '" + config.host + "'");
  const tcp::endpoint endpoint(address, config.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on " + config.host + ":" + std::to_string(config.port) + ": " + ec.message());
  Impl* p = impl.get();
  net::co_spawn(net::make_strand(p->ioc), p->Accept(), net::detached);
  for (size_t i = 0; i < p->urls.size(); ++i) net::co_spawn(net::make_strand(p->ioc), p->Check(i), net::detached);
  for (int t = 0; t < config.num_threads; ++t) p->threads.emplace_back([p] { p->ioc.run(); });
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(impl)));
}

RouterServer::RouterServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RouterServer::~RouterServer() { Stop(); }

uint16_t RouterServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void RouterServer::Stop() {
  if (impl_ == nullptr || impl_->stopping.exchange(true)) return;
  net::post(impl_->acceptor.get_executor(), [p = impl_.get()] {
    beast::error_code ignored;
    p->acceptor.close(ignored);
  });
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
}

}  // namespace peregrine::router
