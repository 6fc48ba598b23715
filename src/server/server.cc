#include "server/server.h"

#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "server/http_connection.h"
#include "server/router.h"
#include "server/serving_context.h"

namespace peregrine::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// A TaskQueue over an Asio executor until Close(); tasks never let an exception escape into
// the event loop.
class ExecutorQueue final : public TaskQueue {
 public:
  explicit ExecutorQueue(asio::any_io_executor executor) : executor_(std::move(executor)) {}

  bool Post(std::function<void()> task) override {
    std::lock_guard lock(mutex_);
    if (!is_open_) return false;
    asio::post(executor_, [task = std::move(task)] {
      try {
        task();
      } catch (...) {  // a failed task must not take the event loop down
      }
    });
    return true;
  }
  void Close() {
    std::lock_guard lock(mutex_);
    is_open_ = false;
  }

 private:
  std::mutex mutex_;
  bool is_open_ = true;
  asio::any_io_executor executor_;
};

uint64_t RandomSeed() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

// Waits (polling; shutdown paths only) until `done()` or the deadline.
template <typename F>
bool WaitUntil(Clock::time_point deadline, F done) {
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

class Server::Impl {
 public:
  struct IoThread {
    LiveConnections live;  // outlives the io_context: connection frames unregister from it
    asio::io_context io{1};
    std::shared_ptr<ExecutorQueue> queue = std::make_shared<ExecutorQueue>(io.get_executor());
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    std::thread thread;
  };

  Impl(ServerConfig server_config, EngineClient& engine, const tokenizer::Tokenizer& tokenizer)
      : context(std::make_shared<ServingContext>(std::move(server_config), engine, tokenizer,
                                                 RandomSeed())),
        config(context->config),
        router(context),
        metrics_router(context, RouteSet::kMetrics) {}

  // Accepts on `listener` (the API or the metrics port), spreading connections over the I/O
  // threads; every connection counts against max_connections.
  asio::awaitable<void> AcceptLoop(tcp::acceptor* listener, Router* routes) {
    size_t next = 0;
    for (;;) {
      IoThread& t = *io_threads[next++ % io_threads.size()];
      tcp::socket socket(t.io);
      boost::system::error_code ec;
      co_await listener->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (!listener->is_open()) co_return;
      if (ec) {
        // Out of descriptors or a transient network error: back off instead of spinning.
        asio::steady_timer pause(listener->get_executor(), std::chrono::milliseconds(50));
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      if (context->metrics.num_connections() >= config.limits.max_connections) {
        socket.close(ec);
        continue;
      }
      ConnectionEnv env{&config, context.get(), routes, t.queue, &t.live, &num_active_exchanges};
      asio::co_spawn(t.io, ServeConnection(std::move(socket), env), asio::detached);
    }
  }

  // Opens, binds and listens; the bound port in *port. Unavailable naming the address.
  Status Listen(const asio::ip::address& address, uint16_t requested, std::unique_ptr<tcp::acceptor>& out,
                uint16_t* port) {
    const tcp::endpoint endpoint(address, requested);
    auto listener = std::make_unique<tcp::acceptor>(io_threads[0]->io);
    boost::system::error_code ec;
    listener->open(endpoint.protocol(), ec);
    if (!ec) listener->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) listener->bind(endpoint, ec);
    if (!ec) listener->listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) *port = listener->local_endpoint(ec).port();
    if (ec) {
      return Unavailable("cannot listen on " + config.host + ":" + std::to_string(requested) + ": " + ec.message());
    }
    out = std::move(listener);
    return Status::Ok();
  }

  std::shared_ptr<ServingContext> context;
  const ServerConfig& config;
  Router router;
  Router metrics_router;
  std::atomic<int> num_active_exchanges{0};
  std::vector<std::unique_ptr<IoThread>> io_threads;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<tcp::acceptor> metrics_acceptor;  // with config.metrics_port only
  std::unique_ptr<asio::thread_pool> workers;
  std::shared_ptr<ExecutorQueue> worker_queue;
};

Server::Server(ServerConfig config, EngineClient& engine, const tokenizer::Tokenizer& tokenizer)
    : impl_(std::make_unique<Impl>(std::move(config), engine, tokenizer)) {}

void Server::SetKvTransfer(disaggregation::KvSender* sender, disaggregation::KvReceiver* receiver) {
  impl_->context->kv_sender = sender;
  impl_->context->kv_receiver = receiver;
}

Server::~Server() { Stop(); }

bool Server::is_draining() const { return impl_->context->is_draining(); }

int Server::num_active_exchanges() const { return impl_->num_active_exchanges.load(); }

size_t Server::num_live_jobs() const { return impl_->context->registry.size(); }

ServerCounters Server::counters() const { return impl_->context->metrics.counters(); }

Status Server::Start() {
  std::lock_guard lock(stop_mutex_);
  if (is_started_) return InvalidArgument("server already started");
  Impl& m = *impl_;
  PG_RETURN_IF_ERROR(ValidateServerConfig(m.config));
  for (int i = 0; i < m.config.num_io_threads; ++i) {
    m.io_threads.push_back(std::make_unique<Impl::IoThread>());
  }
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(m.config.host, ec);
  if (ec && m.config.host == "localhost") address = asio::ip::address_v4::loopback(), ec = {};
  if (ec) return InvalidArgument("server host is not an IP address");
  Status listening = m.Listen(address, m.config.port, m.acceptor, &port_);
  if (listening.ok() && m.config.metrics_port) {
    listening = m.Listen(address, *m.config.metrics_port, m.metrics_acceptor, &metrics_port_);
  }
  if (!listening.ok()) {
    m.acceptor.reset();
    m.metrics_acceptor.reset();
    m.io_threads.clear();
    port_ = metrics_port_ = 0;
    return listening;
  }
  m.workers = std::make_unique<asio::thread_pool>(m.config.num_worker_threads);
  m.worker_queue = std::make_shared<ExecutorQueue>(m.workers->get_executor());
  m.context->workers = m.worker_queue;
  asio::co_spawn(m.io_threads[0]->io, m.AcceptLoop(m.acceptor.get(), &m.router), asio::detached);
  if (m.metrics_acceptor) {
    asio::co_spawn(m.io_threads[0]->io, m.AcceptLoop(m.metrics_acceptor.get(), &m.metrics_router), asio::detached);
  }
  for (auto& t : m.io_threads) {
    t->thread = std::thread([io = &t->io] { io->run(); });
  }
  is_started_ = true;
  return Status::Ok();
}

void Server::Drain(std::optional<std::chrono::milliseconds> timeout) {
  Impl& m = *impl_;
  m.context->set_draining();
  const auto deadline = Clock::now() + timeout.value_or(m.config.timeouts.drain);
  const auto idle = [&m] { return m.num_active_exchanges.load() == 0; };
  const auto idle_or_ended = [&] { return idle() || is_drain_ended_.load(); };
  if (!WaitUntil(deadline, idle_or_ended) || !idle()) {
    for (const JobRegistry::Entry& entry : m.context->registry.Entries()) {
      entry.abort_for_shutdown();
    }
    WaitUntil(Clock::now() + m.config.timeouts.drain_grace, idle);
  }
  Stop();
}

void Server::EndDrain() {
  impl_->context->set_draining();
  is_drain_ended_.store(true);
}

void Server::Stop() {
  std::lock_guard lock(stop_mutex_);
  if (!is_started_ || is_stopped_) return;
  is_stopped_ = true;
  Impl& m = *impl_;
  m.context->set_draining();
  // The acceptors belong to I/O thread 0; close them there.
  asio::post(m.io_threads[0]->io, [&m] {
    boost::system::error_code ec;
    m.acceptor->close(ec);
    if (m.metrics_acceptor) m.metrics_acceptor->close(ec);
  });
  for (const JobRegistry::Entry& entry : m.context->registry.Entries()) {
    for (const std::string& id : entry.engine_ids) m.context->engine.Abort(id);
  }
  for (auto& t : m.io_threads) {
    asio::post(t->io, [live = &t->live] { live->CloseAll(); });
  }
  // Let the aborts come back from the engine and the connections unwind, briefly.
  const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
  WaitUntil(deadline, [&m] {
    return m.context->registry.size() == 0 && m.context->metrics.num_connections() == 0;
  });
  m.worker_queue->Close();
  m.workers->join();
  for (auto& t : m.io_threads) {
    t->queue->Close();
    t->work.reset();
    t->io.stop();
  }
  for (auto& t : m.io_threads) {
    if (t->thread.joinable()) t->thread.join();
  }
  // Destroying the io_contexts destroys what is left of the connection coroutines.
  m.acceptor.reset();
  m.metrics_acceptor.reset();
  m.io_threads.clear();
}

}  // namespace peregrine::server
