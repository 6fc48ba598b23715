#include "fake_openai_server.h"

#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace peregrine::bench_client::testing {

namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using Tcp = boost::asio::ip::tcp;
using Json = nlohmann::json;

bool WriteRaw(Tcp::socket& socket, const std::string& bytes) {
  beast::error_code ec;
  net::write(socket, net::buffer(bytes), ec);
  return !ec;
}

bool WriteWhole(Tcp::socket& socket, int status, const std::string& reason, const std::string& body) {
  char head[256];
  std::snprintf(head, sizeof(head),
                "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", status,
                reason.c_str(), body.size());
  return WriteRaw(socket, head + body);
}

bool WriteEvent(Tcp::socket& socket, const std::string& data) {
  const std::string event = "data: " + data + "\n\n";
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", event.size());
  return WriteRaw(socket, size + event + "\r\n");
}

Json TokenChunk(bool is_chat, const std::string& text) {
  if (is_chat) return {{"choices", Json::array({{{"index", 0}, {"delta", {{"content", text}}}}})}};
  return {{"choices", Json::array({{{"index", 0}, {"text", text}}})}};
}

int64_t CountWords(const std::string& text) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : text) {
    if (c != ' ' && !in_word) ++n;
    in_word = c != ' ';
  }
  return n;
}

}  // namespace

struct FakeOpenAiServer::Impl {
  net::io_context ioc;
  Tcp::acceptor acceptor{ioc, Tcp::endpoint(net::ip::address_v4::loopback(), 0)};
  std::vector<std::unique_ptr<Tcp::socket>> sockets;  // guarded by mu_
};

FakeOpenAiServer::FakeOpenAiServer(FakeServerScript script)
    : impl_(std::make_unique<Impl>()), script_(std::move(script)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

FakeOpenAiServer::~FakeOpenAiServer() {
  is_stopping_ = true;
  {
    // Wakes the blocking accept; the loop sees is_stopping_ and ends.
    net::io_context ioc;
    Tcp::socket poke(ioc);
    beast::error_code ec;
    poke.connect(impl_->acceptor.local_endpoint(), ec);
  }
  accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& socket : impl_->sockets) ::shutdown(socket->native_handle(), SHUT_RDWR);
  }
  for (std::thread& t : threads_) t.join();
}

std::string FakeOpenAiServer::base_url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->acceptor.local_endpoint().port());
}

std::vector<std::string> FakeOpenAiServer::bodies() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bodies_;
}

void FakeOpenAiServer::AcceptLoop() {
  for (;;) {
    auto socket = std::make_unique<Tcp::socket>(impl_->ioc);
    beast::error_code ec;
    impl_->acceptor.accept(*socket, ec);
    if (is_stopping_ || ec) return;
    socket->set_option(Tcp::no_delay(true), ec);  // small SSE writes must not wait for ACKs
    ++num_connections_;
    std::lock_guard<std::mutex> lock(mu_);
    impl_->sockets.push_back(std::move(socket));
    const int index = static_cast<int>(impl_->sockets.size()) - 1;
    threads_.emplace_back([this, index] { Serve(index); });
  }
}

void FakeOpenAiServer::Serve(int connection_index) {
  Tcp::socket* socket = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    socket = impl_->sockets[static_cast<size_t>(connection_index)].get();
  }
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> request;
    beast::error_code ec;
    http::read(*socket, buffer, request, ec);
    if (ec) return;
    if (request.method() == http::verb::get && request.target() == "/v1/models") {
      if (!WriteWhole(*socket, 200, "OK", R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})")) return;
      continue;
    }
    if (request.method() != http::verb::post) {
      if (!WriteWhole(*socket, 404, "Not Found", R"({"error":{"message":"no such route"}})")) return;
      continue;
    }
    if (!script_.required_api_key.empty() &&
        request[http::field::authorization] != "Bearer " + script_.required_api_key) {
      if (!WriteWhole(*socket, 401, "Unauthorized", R"({"error":{"message":"bad key"}})")) return;
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      bodies_.push_back(request.body());
    }
    const Json body = Json::parse(request.body(), nullptr, false);
    const std::string model = body.value("model", "");
    const int max_tokens = body.value("max_tokens", 16);
    const bool is_chat = request.target().ends_with("/chat/completions");
    const std::string prompt = body.value(Json::json_pointer(is_chat ? "/messages/0/content" : "/prompt"), std::string());
    if (model == "fail-500") {
      if (!WriteWhole(*socket, 500, "Internal Server Error", R"({"error":{"message":"injected failure"}})")) return;
      continue;
    }
    if (!WriteRaw(*socket, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n")) {
      return;
    }
    std::this_thread::sleep_for(script_.first_token_delay);
    if (is_chat && !WriteEvent(*socket, R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})")) return;
    const int tokens_per_chunk = model == "two-per-chunk" ? 2 : 1;
    for (int i = 0; i < max_tokens; i += tokens_per_chunk) {
      if (i > 0) std::this_thread::sleep_for(script_.token_delay);
      if (model == "close-mid" && i == max_tokens / 2) {
        ::shutdown(socket->native_handle(), SHUT_RDWR);
        return;
      }
      if (!WriteEvent(*socket, TokenChunk(is_chat, tokens_per_chunk == 2 ? " ab" : " a").dump())) return;
      if (model == "error-chunk") {
        if (!WriteEvent(*socket, R"({"error":{"message":"boom","code":500}})")) return;
        break;
      }
      if (model == "bad-json") {
        if (!WriteEvent(*socket, "{not json")) return;
        break;
      }
    }
    if (model != "no-usage") {
      const Json usage = {{"choices", Json::array()},
                          {"usage", {{"prompt_tokens", CountWords(prompt)}, {"completion_tokens", max_tokens}}}};
      if (!WriteEvent(*socket, usage.dump())) return;
    }
    if (!WriteEvent(*socket, "[DONE]") || !WriteRaw(*socket, "0\r\n\r\n")) return;
    if (script_.close_idle_after.count() > 0) {
      std::this_thread::sleep_for(script_.close_idle_after);
      ::shutdown(socket->native_handle(), SHUT_RDWR);
      return;
    }
    if (!request.keep_alive()) return;
  }
}

}  // namespace peregrine::bench_client::testing
