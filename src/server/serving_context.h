// ServingContext: what request handlers share, owned by Server and alive until it is
// destroyed. Everything here is thread-safe (immutable, atomic or internally locked).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "engine/engine_client.h"
#include "server/job_registry.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "server/task_queue.h"
#include "structured/grammar_engine.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::disaggregation {
class KvSender;
class KvReceiver;
}  // namespace peregrine::disaggregation

namespace peregrine::server {

class ServingContext {
 public:
  ServingContext(ServerConfig config, EngineClient& engine, const tokenizer::Tokenizer& tokenizer,
                 uint64_t random_seed)
      : config(std::move(config)), engine(engine), tokenizer(tokenizer),
        metrics(MetricsOptions{this->config.metrics_naming, this->config.model_name, engine.max_context(),
                               this->config.disaggregation.mode != DisaggregationMode::kNull}),
        random_state_(random_seed) {}

  const ServerConfig config;  // a copy: jobs may outlive the Server object
  EngineClient& engine;
  const tokenizer::Tokenizer& tokenizer;
  ServerMetrics metrics;
  JobRegistry registry;
  std::shared_ptr<TaskQueue> workers;  // set by Server before serving
  // Disaggregation (config.disaggregation): the KV transfer's ends, owned by whoever runs the
  // server and alive while it serves; set before Start. Prefill mode has a sender, decode
  // mode a receiver.
  disaggregation::KvSender* kv_sender = nullptr;
  disaggregation::KvReceiver* kv_receiver = nullptr;

  bool is_draining() const { return is_draining_.load(std::memory_order_acquire); }
  void set_draining() { is_draining_.store(true, std::memory_order_release); }

  // Admission for generation requests: a slot while fewer than max_concurrent_requests are in
  // flight, released when the returned ticket is destroyed. Null when full.
  std::shared_ptr<void> TryAdmit();
  int num_admitted() const { return num_admitted_.load(std::memory_order_relaxed); }

  // Structured outputs' grammar compiler over the model's vocabulary, made on first use (the
  // vocabulary's preprocessing costs a moment). Thread-safe.
  Result<structured::GrammarEngine*> grammars();

  // Unpredictable across requests (tool-call ids, response ids); not cryptographic.
  uint64_t NextRandom();
  // "prefix" + 24 hex digits, unique for the life of the server.
  std::string NewId(const char* prefix);

 private:
  std::atomic<bool> is_draining_{false};
  std::atomic<int> num_admitted_{0};
  std::atomic<uint64_t> random_state_;
  std::once_flag grammars_once_;
  Result<std::unique_ptr<structured::GrammarEngine>> grammars_{Internal("not made yet")};
};

}  // namespace peregrine::server
