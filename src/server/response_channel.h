// ResponseChannel: what a handler writes its response into, and what the connection drains
// onto the socket. One per request. Every method runs on the connection's thread (`home()`);
// work from other threads reaches it through home().Post.
//
// A response is either whole (Respond) or a stream (BeginStream, Write..., End). When the
// client goes away first, the cancel handler runs once and later writes are dropped.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "server/http_message.h"
#include "server/task_queue.h"

namespace peregrine::server {

struct ChannelOutput {
  bool has_head = false;   // `head` is new: write the status line and headers
  bool is_stream = false;  // head starts a stream (chunked), else a whole response
  HttpResponse head;       // for a whole response, head.body is the body
  std::string data;        // stream bytes written since the last take
  bool is_end = false;     // nothing follows
};

class ResponseChannel {
 public:
  explicit ResponseChannel(std::shared_ptr<TaskQueue> home) : home_(std::move(home)) {}

  // --- handler side ---
  void Respond(HttpResponse response);
  void BeginStream(HttpResponse head);
  void Write(std::string_view data);
  void End();
  // Runs once when the client disconnects before the response ended (also on server stop).
  // Runs at once if the client is already gone.
  void SetCancelHandler(std::function<void()> on_cancel);
  bool is_client_gone() const { return is_client_gone_; }
  bool is_started() const { return state_ != State::kIdle; }
  bool is_ended() const { return state_ == State::kEnded; }
  const std::shared_ptr<TaskQueue>& home() const { return home_; }

  // --- connection side ---
  void Attach(std::function<void()> notify) { notify_ = std::move(notify); }
  bool has_output() const;
  ChannelOutput TakeOutput();
  // The client disconnected or the connection is being torn down.
  void MarkClientGone();

 private:
  enum class State { kIdle, kWhole, kStreaming, kEnded };
  void Notify();

  std::shared_ptr<TaskQueue> home_;
  std::function<void()> notify_;
  std::function<void()> on_cancel_;
  State state_ = State::kIdle;
  bool is_client_gone_ = false;
  bool head_pending_ = false;
  bool end_pending_ = false;
  bool is_stream_ = false;
  HttpResponse head_;
  std::string data_;
};

}  // namespace peregrine::server
