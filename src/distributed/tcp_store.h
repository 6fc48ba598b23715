// The rendezvous of a group of ranks: a key-value store served by one process (rank 0, at
// --dist-init-addr) that every rank reaches over TCP. Ranks publish their addresses and NCCL's
// unique id through it before the communicator exists; nothing else crosses it.
//
// Ownership: a TcpStoreServer owns its listening socket and one thread per connection; it
// serves until destroyed. A TcpStore client owns one connection and is used from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace peregrine::distributed {

class TcpStoreServer {
 public:
  // Listens on host:port (port 0: any free port, see port()).
  static Result<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  ~TcpStoreServer();
  int port() const;

  struct State;

 private:
  explicit TcpStoreServer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

class TcpStore {
 public:
  // Connects to host:port, retrying until `timeout` passes (the server may start later).
  static Result<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                   std::chrono::milliseconds timeout);
  ~TcpStore();

  Status Set(const std::string& key, const std::vector<char>& value);
  // Waits until `key` is set (DeadlineExceeded after the store's timeout) and returns it.
  // After a failed call the connection is unusable: every later call fails.
  Result<std::vector<char>> Get(const std::string& key);

  struct Connection;

 private:
  TcpStore(std::unique_ptr<Connection> connection, std::chrono::milliseconds timeout);
  std::unique_ptr<Connection> connection_;
  std::chrono::milliseconds timeout_;
  Status broken_ = Status::Ok();
};

}  // namespace peregrine::distributed
