#include "bench_client/stream_client.h"

#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "bench_client/stream_exchange.h"

namespace peregrine::bench_client {

namespace {

using namespace internal;  // NOLINT: the Beast aliases of this folder

constexpr auto kGetTimeout = std::chrono::seconds(30);

}  // namespace

struct StreamClient::Impl {
  explicit Impl(const ClientOptions& o) : options(o), ioc(o.num_threads) {}

  ClientOptions options;
  net::io_context ioc;                 // declared first: every socket below is bound to it
  std::optional<ConnectionPool> pool;  // set by Create after resolving
  ExchangeContext context;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
};

StreamClient::StreamClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StreamClient::~StreamClient() {
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
}

Result<std::unique_ptr<StreamClient>> StreamClient::Create(const ClientOptions& options) {
  if (options.num_threads < 1) return InvalidArgument("the client needs at least one thread");
  if (!(options.request_timeout_s > 0)) return InvalidArgument("request timeout must be positive");
  auto impl = std::make_unique<Impl>(options);
  Tcp::resolver resolver(impl->ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(options.base_url.host, options.base_url.port, ec);
  if (ec) return Unavailable("cannot resolve " + options.base_url.host + ": " + ec.message());
  impl->pool.emplace(impl->ioc, std::move(endpoints));
  impl->context.pool = &*impl->pool;
  impl->context.host_header = HostHeader(options.base_url);
  if (!options.api_key.empty()) impl->context.authorization = "Bearer " + options.api_key;
  impl->context.timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.request_timeout_s));
  impl->work.emplace(impl->ioc.get_executor());
  for (int i = 0; i < options.num_threads; ++i) {
    impl->threads.emplace_back([ioc = &impl->ioc] { ioc->run(); });
  }
  return std::unique_ptr<StreamClient>(new StreamClient(std::move(impl)));
}

void StreamClient::Submit(const StreamRequest& request, DoneCallback done) {
  std::make_shared<StreamExchange>(impl_->context, request, std::move(done))->Start();
}

int64_t StreamClient::num_connections_opened() const { return impl_->pool->num_opened(); }

Result<std::string> StreamClient::Get(std::string_view target) {
  // A private event loop on the calling thread keeps this independent of the streaming threads.
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::empty_body> request(http::verb::get, beast::string_view(target.data(), target.size()), 11);
  request.set(http::field::host, impl_->context.host_header);
  request.set(http::field::user_agent, "peregrine-bench");
  if (!impl_->context.authorization.empty()) request.set(http::field::authorization, impl_->context.authorization);
  http::response<http::string_body> response;
  beast::error_code failure;
  std::string step;
  stream.expires_after(kGetTimeout);
  stream.async_connect(impl_->pool->endpoints(), [&](beast::error_code ec, const Tcp::endpoint&) {
    if (ec) return void((failure = ec, step = "connect"));
    http::async_write(stream, request, [&](beast::error_code ec, size_t) {
      if (ec) return void((failure = ec, step = "write"));
      http::async_read(stream, buffer, response, [&](beast::error_code ec, size_t) {
        if (ec) failure = ec, step = "read";
      });
    });
  });
  ioc.run();
  beast::error_code ignored;
  stream.socket().close(ignored);
  if (failure) return Unavailable("GET " + std::string(target) + ": " + step + ": " + failure.message());
  if (response.result_int() != 200) {
    return Unavailable("GET " + std::string(target) + ": HTTP " + std::to_string(response.result_int()) + ": " +
                    response.body().substr(0, 512));
  }
  return std::move(response.body());
}

}  // namespace peregrine::bench_client
