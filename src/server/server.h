// Server: the OpenAI-compatible HTTP front end of Peregrine.
//
//   Server server(config, engine, tokenizer);
//   PG_RETURN_IF_ERROR(server.Start());   // binds host:port (0: ephemeral, see port())
//   ...                                   // on SIGTERM:
//   server.Drain();                       // readiness false, finish or abort in-flight, stop
//
// Threads: `num_io_threads` I/O threads run the connections (each connection lives on one);
// `num_worker_threads` parse, render and tokenize requests; the engine calls its sinks on its
// own thread and they post to the connection's I/O thread. Public methods are for one
// controlling thread (not an I/O thread).
//
// Ownership: the engine and the tokenizer are borrowed and must outlive the Server (or at
// least Stop()). After Stop() no server thread touches them; late engine events are dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "base/status.h"
#include "engine/engine_client.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::disaggregation {
class KvSender;
class KvReceiver;
}  // namespace peregrine::disaggregation

namespace peregrine::server {

class Server {
 public:
  Server(ServerConfig config, EngineClient& engine, const tokenizer::Tokenizer& tokenizer);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Validates the config, binds and starts serving. InvalidArgument for a bad config,
  // Unavailable when the address cannot be bound; on failure nothing keeps running.
  Status Start();
  // Disaggregation (config.disaggregation.mode): the KV transfer's end this server uses, owned
  // by the caller and alive until the engine has stopped. Call before Start.
  void SetKvTransfer(disaggregation::KvSender* sender, disaggregation::KvReceiver* receiver);
  // The bound port (the ephemeral one when config.port was 0); 0 before Start.
  uint16_t port() const { return port_; }
  // The bound metrics port with config.metrics_port; 0 otherwise (and before Start).
  uint16_t metrics_port() const { return metrics_port_; }

  // Graceful shutdown: readiness turns false and new requests get 503 at once; in-flight
  // requests may finish for `timeout` (config.timeouts.drain when absent); those still
  // running are then aborted with an error event (streams) or 503, given
  // config.timeouts.drain_grace to flush, and the server stops. Blocks until stopped.
  void Drain(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Cuts a running (or the next) Drain's waiting short, as if its timeout had passed: the
  // requests still running get their final error event (streams: an error event and
  // `data: [DONE]`) or a 503 now, and the server stops once those are written (at most
  // drain_grace later). Thread-safe; returns at once. For a second SIGTERM.
  void EndDrain();
  // Stops at once: aborts every live engine request, closes every connection, joins the
  // threads. Idempotent.
  void Stop();

  bool is_draining() const;
  // Requests read whose response is not yet fully written.
  int num_active_exchanges() const;
  // Generation jobs with live engine requests.
  size_t num_live_jobs() const;
  // Tokens served so far (valid from construction to destruction).
  ServerCounters counters() const;

 private:
  class Impl;

  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  uint16_t metrics_port_ = 0;
  std::mutex stop_mutex_;
  bool is_started_ = false;
  bool is_stopped_ = false;
  std::atomic<bool> is_drain_ended_{false};
};

}  // namespace peregrine::server
