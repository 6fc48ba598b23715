#include "server/response_channel.h"

#include <utility>

namespace peregrine::server {

void ResponseChannel::Respond(HttpResponse response) {
  if (state_ != State::kIdle || is_client_gone_) return;
  state_ = State::kEnded;
  head_ = std::move(response);
  head_pending_ = true;
  end_pending_ = true;
  is_stream_ = false;
  on_cancel_ = nullptr;
  Notify();
}

void ResponseChannel::BeginStream(HttpResponse head) {
  if (state_ != State::kIdle || is_client_gone_) return;
  state_ = State::kStreaming;
  head_ = std::move(head);
  head_pending_ = true;
  is_stream_ = true;
  Notify();
}

void ResponseChannel::Write(std::string_view data) {
  if (state_ != State::kStreaming || is_client_gone_ || data.empty()) return;
  data_.append(data);
  Notify();
}

void ResponseChannel::End() {
  if (state_ != State::kStreaming || is_client_gone_) return;
  state_ = State::kEnded;
  end_pending_ = true;
  on_cancel_ = nullptr;
  Notify();
}

void ResponseChannel::SetCancelHandler(std::function<void()> on_cancel) {
  if (is_client_gone_) {
    if (on_cancel) on_cancel();
    return;
  }
  on_cancel_ = std::move(on_cancel);
}

bool ResponseChannel::has_output() const {
  return head_pending_ || end_pending_ || !data_.empty();
}

ChannelOutput ResponseChannel::TakeOutput() {
  ChannelOutput out;
  out.has_head = head_pending_;
  out.is_stream = is_stream_;
  if (head_pending_) out.head = std::move(head_);
  out.data = std::move(data_);
  data_.clear();
  out.is_end = end_pending_;
  head_pending_ = false;
  end_pending_ = false;
  return out;
}

void ResponseChannel::MarkClientGone() {
  if (is_client_gone_) return;
  is_client_gone_ = true;
  notify_ = nullptr;
  data_.clear();
  if (state_ == State::kEnded) return;
  std::function<void()> cancel = std::move(on_cancel_);
  on_cancel_ = nullptr;
  if (cancel) cancel();
}

void ResponseChannel::Notify() {
  if (notify_) notify_();
}

}  // namespace peregrine::server
