#include "distributed/tcp_store.h"

#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace peregrine::distributed {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr uint8_t kSet = 1;
constexpr uint8_t kGet = 2;
constexpr uint32_t kMaxField = 1u << 20;  // keys and values are addresses and ids, never bulk

void WriteField(tcp::socket& s, const void* data, uint32_t size) {
  asio::write(s, asio::buffer(&size, sizeof size));
  if (size > 0) asio::write(s, asio::buffer(data, size));
}

std::string ReadString(tcp::socket& s) {
  uint32_t size = 0;
  asio::read(s, asio::buffer(&size, sizeof size));
  if (size > kMaxField) throw std::runtime_error("store field too long");
  std::string out(size, '\0');
  if (size > 0) asio::read(s, asio::buffer(out.data(), size));
  return out;
}

}  // namespace

struct TcpStoreServer::State {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, std::string> values;
  std::vector<std::shared_ptr<tcp::socket>> sockets;
  std::vector<std::thread> threads;
  std::thread accept_thread;
  bool stopping = false;

  void Serve(const std::shared_ptr<tcp::socket>& s) {
    try {
      for (;;) {
        uint8_t op = 0;
        asio::read(*s, asio::buffer(&op, 1));
        const std::string key = ReadString(*s);
        if (op == kSet) {
          std::string value = ReadString(*s);
          {
            std::lock_guard lock(mu);
            values[key] = std::move(value);
          }
          changed.notify_all();
          const uint8_t ok = 0;
          asio::write(*s, asio::buffer(&ok, 1));
        } else if (op == kGet) {
          std::string value;
          {
            std::unique_lock lock(mu);
            changed.wait(lock, [&] { return stopping || values.count(key) > 0; });
            if (stopping) return;
            value = values[key];
          }
          const uint8_t ok = 0;
          asio::write(*s, asio::buffer(&ok, 1));
          WriteField(*s, value.data(), static_cast<uint32_t>(value.size()));
        } else {
          return;  // not a store client: drop it
        }
      }
    } catch (const std::exception&) {
      // The client went away (or sent garbage); its connection ends here.
    }
  }

  void Accept() {
    for (;;) {
      auto s = std::make_shared<tcp::socket>(io);
      boost::system::error_code ec;
      acceptor.accept(*s, ec);
      std::lock_guard lock(mu);
      if (stopping) return;
      if (ec) continue;
      sockets.push_back(s);
      threads.emplace_back([this, s] { Serve(s); });
    }
  }
};

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port) {
  auto state = std::make_shared<State>();
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return InvalidArgument("the rendezvous address '" + host + "' is not an IP address");
  const tcp::endpoint ep(address, static_cast<uint16_t>(port));
  state->acceptor.open(ep.protocol(), ec);
  if (!ec) state->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) state->acceptor.bind(ep, ec);
  if (!ec) state->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen for ranks on " + host + ":" + std::to_string(port) + ": " + ec.message());
  State* raw = state.get();
  state->accept_thread = std::thread([raw] { raw->Accept(); });
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(state)));
}

TcpStoreServer::TcpStoreServer(std::shared_ptr<State> state) : state_(std::move(state)) {}

int TcpStoreServer::port() const { return state_->acceptor.local_endpoint().port(); }

TcpStoreServer::~TcpStoreServer() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    boost::system::error_code ec;
    // shutdown() wakes a blocked accept() on Linux; close() alone does not.
    ::shutdown(state_->acceptor.native_handle(), SHUT_RDWR);
    for (auto& s : state_->sockets) s->shutdown(tcp::socket::shutdown_both, ec);
  }
  state_->changed.notify_all();
  state_->accept_thread.join();
  for (auto& t : state_->threads) t.join();
}

struct TcpStore::Connection {
  asio::io_context io;
  tcp::socket socket{io};
};

Result<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                    std::chrono::milliseconds timeout) {
  auto c = std::make_unique<Connection>();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  for (;;) {
    boost::system::error_code ec;
    tcp::resolver resolver(c->io);
    const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (!ec) {
      asio::connect(c->socket, endpoints, ec);
      if (!ec) break;
    }
    last = ec.message();
    c->socket.close(ec);
    if (std::chrono::steady_clock::now() >= deadline)
      return Unavailable("cannot reach the rendezvous at " + host + ":" + std::to_string(port) + ": " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  c->socket.set_option(tcp::no_delay(true));
  return std::unique_ptr<TcpStore>(new TcpStore(std::move(c), timeout));
}

TcpStore::TcpStore(std::unique_ptr<Connection> connection, std::chrono::milliseconds timeout)
    : connection_(std::move(connection)), timeout_(timeout) {}

TcpStore::~TcpStore() = default;

Status TcpStore::Set(const std::string& key, const std::vector<char>& value) {
  if (key.size() > kMaxField || value.size() > kMaxField) return InvalidArgument("store entry too long");
  if (!broken_.ok()) return broken_;
  try {
    tcp::socket& s = connection_->socket;
    asio::write(s, asio::buffer(&kSet, 1));
    WriteField(s, key.data(), static_cast<uint32_t>(key.size()));
    WriteField(s, value.data(), static_cast<uint32_t>(value.size()));
    uint8_t ok = 1;
    asio::read(s, asio::buffer(&ok, 1));
    if (ok != 0) return broken_ = Internal("the rendezvous refused key " + key);
  } catch (const std::exception& e) {
    return broken_ = Unavailable(std::string("the rendezvous went away: ") + e.what());
  }
  return Status::Ok();
}

Result<std::vector<char>> TcpStore::Get(const std::string& key) {
  if (key.size() > kMaxField) return InvalidArgument("store key too long");
  if (!broken_.ok()) return broken_;
  try {
    tcp::socket& s = connection_->socket;
    asio::write(s, asio::buffer(&kGet, 1));
    WriteField(s, key.data(), static_cast<uint32_t>(key.size()));
    // A Get that outlives the timeout fails instead of waiting for a rank that never comes.
    pollfd pfd{s.native_handle(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(timeout_.count()));
    if (ready == 0)
      return broken_ = DeadlineExceeded("no rank published '" + key + "' within " +
                                        std::to_string(timeout_.count()) + " ms");
    uint8_t ok = 1;
    boost::system::error_code ec;
    asio::read(s, asio::buffer(&ok, 1), ec);
    if (ec) return broken_ = Unavailable("the rendezvous went away: " + ec.message());
    const std::string value = ReadString(s);
    return std::vector<char>(value.begin(), value.end());
  } catch (const std::exception& e) {
    return broken_ = Unavailable(std::string("the rendezvous went away: ") + e.what());
  }
}

}  // namespace peregrine::distributed
