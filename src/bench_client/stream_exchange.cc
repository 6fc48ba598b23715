#include "bench_client/stream_exchange.h"

#include <boost/asio/strand.hpp>
#include <limits>

#include "bench_client/stream_chunk.h"

namespace peregrine::bench_client::internal {

namespace {

constexpr size_t kMaxErrorBody = 512;

void Close(beast::tcp_stream& stream) {
  beast::error_code ignored;
  stream.socket().shutdown(Tcp::socket::shutdown_both, ignored);
  stream.socket().close(ignored);
}

}  // namespace

std::unique_ptr<beast::tcp_stream> ConnectionPool::TakeIdle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.empty()) return nullptr;
  std::unique_ptr<beast::tcp_stream> stream = std::move(idle_.back());
  idle_.pop_back();
  return stream;
}

std::unique_ptr<beast::tcp_stream> ConnectionPool::MakeNew() {
  num_opened_.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<beast::tcp_stream>(net::make_strand(ioc_));
}

void ConnectionPool::PutIdle(std::unique_ptr<beast::tcp_stream> stream) {
  stream->expires_never();
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(stream));
}

StreamExchange::StreamExchange(const ExchangeContext& context, const StreamRequest& request, DoneCallback done)
    : context_(context), done_(std::move(done)) {
  request_.method(http::verb::post);
  request_.target(request.target);
  request_.version(11);
  request_.set(http::field::host, context.host_header);
  request_.set(http::field::user_agent, "peregrine-bench");
  request_.set(http::field::content_type, "application/json");
  request_.set(http::field::accept, "text/event-stream");
  if (!context.authorization.empty()) request_.set(http::field::authorization, context.authorization);
  request_.keep_alive(true);
  request_.body() = request.body;
  request_.prepare_payload();
}

void StreamExchange::Start() {
  record_.send_time = Clock::now();
  deadline_ = record_.send_time + context_.timeout;
  stream_ = context_.pool->TakeIdle();
  if (stream_ == nullptr) return Connect();
  is_reused_ = true;
  stream_->expires_at(deadline_);
  Write();
}

void StreamExchange::Connect() {
  is_reused_ = false;
  stream_ = context_.pool->MakeNew();
  stream_->expires_at(deadline_);
  stream_->async_connect(context_.pool->endpoints(),
                         [self = shared_from_this()](beast::error_code ec, const Tcp::endpoint&) {
                           if (ec) return self->Fail("connect: " + ec.message());
                           self->stream_->socket().set_option(Tcp::no_delay(true), ec);
                           self->Write();
                         });
}

void StreamExchange::Write() {
  http::async_write(*stream_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec && self->CanRetry()) return self->Connect();
    if (ec) return self->Fail("write: " + ec.message());
    self->ReadHeader();
  });
}

void StreamExchange::ReadHeader() {
  buffer_.clear();
  parser_.emplace();
  // A long stream easily passes the default 8 MB. A huge number rather than boost::none: Boost
  // 1.74 compares a Content-Length against an unset limit and rejects every such body.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  http::async_read_header(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec && self->CanRetry()) return self->Connect();
    if (ec) return self->Fail("read header: " + ec.message());
    self->record_.http_status = static_cast<int>(self->parser_->get().result_int());
    self->ReadBody();
  });
}

// A server may close an idle kept-alive connection at any time; that shows up as a failed write
// or a response that never starts, and only then is the request sent again.
bool StreamExchange::CanRetry() const {
  return is_reused_ && (!parser_.has_value() || (!parser_->got_some() && buffer_.size() == 0));
}

void StreamExchange::ReadBody() {
  http::buffer_body::value_type& body = parser_->get().body();
  body.data = body_buf_.data();
  body.size = body_buf_.size();
  body.more = true;
  http::async_read_some(*stream_, buffer_, *parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void StreamExchange::OnBody(beast::error_code ec) {
  const Clock::time_point now = Clock::now();
  if (ec == http::error::need_buffer) ec = {};
  const size_t num_bytes = body_buf_.size() - parser_->get().body().size;
  const std::string_view bytes(body_buf_.data(), num_bytes);
  if (record_.http_status == 200) {
    sse_.Feed(bytes, events_);
    HandleEvents(now);
  } else if (error_body_.size() < kMaxErrorBody) {
    error_body_.append(bytes.substr(0, kMaxErrorBody - error_body_.size()));
  }
  if (is_finished_) return;
  if (ec) return Fail("read body: " + ec.message());
  if (parser_->is_done()) return Complete(now);
  ReadBody();
}

void StreamExchange::HandleEvents(Clock::time_point now) {
  for (const std::string& data : events_) {
    Result<StreamChunk> chunk = ParseStreamChunk(data);
    if (!chunk.ok()) {
      events_.clear();
      return Fail(chunk.status().message());
    }
    has_done_ = has_done_ || chunk->is_done;
    if (chunk->has_text) record_.token_times.push_back(now);
    if (chunk->prompt_tokens) record_.num_prompt_tokens = *chunk->prompt_tokens;
    if (chunk->completion_tokens) usage_completion_tokens_ = chunk->completion_tokens;
    if (!chunk->error.empty() && chunk_error_.empty()) chunk_error_ = "error chunk: " + chunk->error;
  }
  events_.clear();
}

void StreamExchange::Complete(Clock::time_point now) {
  if (record_.http_status == 200) {
    sse_.Finish(events_);
    HandleEvents(now);
    if (is_finished_) return;
  }
  if (record_.http_status != 200) {
    return Fail("HTTP " + std::to_string(record_.http_status) + ": " + error_body_);
  }
  if (!chunk_error_.empty()) return Fail(chunk_error_);
  if (!has_done_) return Fail("stream ended without [DONE]");
  if (record_.token_times.empty()) return Fail("no output token arrived");
  record_.is_success = true;
  if (parser_->keep_alive()) {
    context_.pool->PutIdle(std::move(stream_));
  } else {
    Close(*stream_);
  }
  Deliver(now);
}

void StreamExchange::Fail(std::string error) {
  if (stream_ != nullptr) Close(*stream_);
  record_.is_success = false;
  record_.error = std::move(error);
  Deliver(Clock::now());
}

void StreamExchange::Deliver(Clock::time_point end) {
  is_finished_ = true;
  record_.end_time = end;
  record_.num_output_tokens =
      usage_completion_tokens_.value_or(static_cast<int64_t>(record_.token_times.size()));
  DoneCallback done = std::move(done_);
  done(std::move(record_));
}

}  // namespace peregrine::bench_client::internal
