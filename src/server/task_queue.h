// TaskQueue: "run this later on that thread". The connection threads and the worker pool are
// TaskQueues; engine sinks post events through one. A closed queue drops tasks, so a late
// engine event after Server::Stop is harmless.
#pragma once

#include <functional>

namespace peregrine::server {

class TaskQueue {
 public:
  virtual ~TaskQueue() = default;
  // Thread-safe. Returns false (and drops `task`) when the queue is closed.
  virtual bool Post(std::function<void()> task) = 0;
};

}  // namespace peregrine::server
