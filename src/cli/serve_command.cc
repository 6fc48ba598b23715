#include "cli/serve_command.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>

#include "base/log.h"
#include "base/version.h"
#include "cli/compat_flags.h"
#include "cli/demo_tokenizer.h"
#include "cli/kv_transfer_setup.h"
#include "cli/rank_launch.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::cli {

namespace {

// The tokenizer: --tokenizer, else the model directory's tokenizer.json, else (the demo
// model, a config-only directory served with synthetic weights, a test fixture) the embedded
// DeepSeek-V4 one; the engine rejects prompts whose ids fall outside the model's vocabulary.
std::string TokenizerPath(const ServeOptions& options) {
  if (!options.tokenizer_path.empty()) return options.tokenizer_path;
  if (options.model_path.empty() || options.model_path == "demo") return {};
  if (!std::filesystem::exists(std::filesystem::path(options.model_path) / "tokenizer.json")) {
    LogWarning("no tokenizer.json in {}: using the embedded DeepSeek-V4 tokenizer", options.model_path);
    return {};
  }
  return options.model_path;
}

// Fails at once, before any weight is loaded, when the address cannot be listened on (a busy
// port, a host that is not an address of this machine).
Status CheckListenAddress(const std::string& host, uint16_t port) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec && host == "localhost") address = asio::ip::address_v4::loopback(), ec = {};
  if (ec) return InvalidArgument("--host " + host + " is not an IP address (nor localhost)");
  if (port == 0) return Status::Ok();
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  const asio::ip::tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec) return Unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  return Status::Ok();
}

// Every `interval` while requests run: running/waiting, prompt and generation tokens/s, KV
// usage and the prefix-cache hit rate over the interval.
class StatsLogger {
 public:
  StatsLogger(const EngineClient& engine, const server::Server& server, double interval_s)
      : engine_(engine), server_(server), interval_(interval_s) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~StatsLogger() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Loop() {
    server::ServerCounters last = server_.counters();
    EngineStats last_engine = engine_.Stats();
    auto last_time = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return stop_; })) {
      const server::ServerCounters now = server_.counters();
      const EngineStats e = engine_.Stats();
      const auto t = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(t - last_time).count();
      const int64_t queried = e.prefix_cache_queries - last_engine.prefix_cache_queries;
      const int64_t hit = e.prefix_cache_hits - last_engine.prefix_cache_hits;
      const bool active = e.num_running > 0 || e.num_waiting > 0 || now.generation_tokens != last.generation_tokens;
      if (active)
        LogInfo("stats: {} running, {} waiting; prompt {:.1f} tok/s, generation {:.1f} tok/s; KV usage {:.1f}%; "
                "prefix-cache hit rate {:.1f}%",
                e.num_running, e.num_waiting, static_cast<double>(now.prompt_tokens - last.prompt_tokens) / dt,
                static_cast<double>(now.generation_tokens - last.generation_tokens) / dt, 100.0 * e.kv_usage,
                queried > 0 ? 100.0 * static_cast<double>(hit) / static_cast<double>(queried) : 0.0);
      last = now;
      last_engine = e;
      last_time = t;
    }
  }

  const EngineClient& engine_;
  const server::Server& server_;
  const double interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

distributed::ParallelConfig ServeOptions::parallel() const {
  distributed::ParallelConfig p;
  p.tp_size = static_cast<int>(tensor_parallel_size);
  p.expert_parallel = enable_expert_parallel || (expert_parallel_size > 1 && expert_parallel_size == tensor_parallel_size);
  p.nnodes = nnodes;
  p.node_rank = node_rank;
  p.dist_init_addr = dist_init_addr;
  p.custom_all_reduce = enable_custom_all_reduce && !disable_custom_all_reduce;
  return p;
}

int RunServe(const ServeOptions& in, const EngineFactory& factory, const RankRunner& rank_runner) {
  const auto started = std::chrono::steady_clock::now();
  if (auto level = ParseLogLevel(in.log_level); level.ok()) SetLogLevel(*level);
  ServeOptions options = in;
  const distributed::ParallelConfig parallel = options.parallel();
  if (Status s = distributed::ValidateParallelConfig(parallel); !s.ok()) {
    LogError("{}", s.message());
    return 1;
  }
  if (options.expert_parallel_size != 1 && options.expert_parallel_size != options.tensor_parallel_size) {
    LogError("--ep must be 1 or equal to --tp (the routed experts are partitioned over the tensor-parallel ranks)");
    return 1;
  }
  if (options.rank > 0) return rank_runner(options);  // a rank this command started
  if (parallel.is_distributed() && options.device != "cpu") {
    // A GPU per rank of this node, checked before any rank starts.
    EngineOptions check;
    check.parallel = parallel;
    check.device = options.device;
    if (Status s = CheckParallelDevices(check); !s.ok()) {
      LogError("{}", s.message());
      return 1;
    }
  }
  // The other ranks of this node, started now; the node's first rank is ours.
  std::unique_ptr<RankSupervisor> ranks;
  std::atomic<bool> rank_died{false};
  if (parallel.is_distributed()) {
    const int first = parallel.node_rank * parallel.ranks_per_node();
    std::string host = "127.0.0.1";
    int port = 0;
    if (!parallel.dist_init_addr.empty()) (void)distributed::ParseHostPort(parallel.dist_init_addr, &host, &port);
    if (first == 0) {
      auto server = distributed::TcpStoreServer::Start(host, port);
      if (!server.ok()) {
        LogError("--dist-init-addr: {}", server.status().message());
        return 1;
      }
      options.rendezvous_server = std::move(server).value();
      port = options.rendezvous_server->port();
    }
    std::vector<int> others;
    for (int r = first + 1; r < first + parallel.ranks_per_node(); ++r) others.push_back(r);
    options.dist_init_addr = host + ":" + std::to_string(port);
    auto spawned = RankSupervisor::Spawn(options.argv, others, options.dist_init_addr,
                                         [&rank_died](int, int) { rank_died = true; });
    if (!spawned.ok()) {
      LogError("{}", spawned.status().message());
      return 1;
    }
    ranks = std::move(spawned).value();
    LogInfo("started ranks {}..{} of {}", first + 1, first + parallel.ranks_per_node() - 1, parallel.tp_size);
    if (first > 0) {
      options.rank = first;
      const int rc = rank_runner(options);
      ranks->Stop();
      return rc;
    }
  }
  if (Status s = CheckListenAddress(options.server.host, options.server.port); !s.ok()) {
    LogError("{}", s.message());
    return 1;
  }
  if (options.server.metrics_port) {
    if (Status s = CheckListenAddress(options.server.host, *options.server.metrics_port); !s.ok()) {
      LogError("--metrics-port: {}", s.message());
      return 1;
    }
  }
  if (parallel.is_distributed() && options.disaggregation_mode != "null") {
    LogError("--disaggregation-mode with --tp > 1 is not supported yet");
    return 1;
  }
  if (options.disaggregation_transfer_backend == "cuda_ipc" && options.disaggregation_mode == "prefill" &&
      options.device != "cuda") {
    LogError("--disaggregation-transfer-backend cuda_ipc: a prefill server keeps its KV on the GPU (--device cuda)");
    return 1;
  }
  const std::string tokenizer_path = TokenizerPath(options);
  if (tokenizer_path.empty() && DemoTokenizerJson().empty()) {
    LogError("this build has no embedded tokenizer; pass --tokenizer");
    return 1;
  }
  // The demo model uses the DeepSeek-V4 tokenizer embedded in the binary.
  Result<tokenizer::Tokenizer> tokenizer = tokenizer_path.empty()
                                               ? tokenizer::Tokenizer::FromJson(DemoTokenizerJson())
                                               : tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    LogError("tokenizer: {}", tokenizer.status().ToString());
    return 1;
  }
  // The transfer's ends outlive the engine, whose export sinks publish on them.
  Result<KvTransferEnds> transfer = StartKvTransfer(options);
  if (!transfer.ok()) {
    LogError("--disaggregation-mode {}: {}", options.disaggregation_mode, transfer.status().message());
    return 1;
  }
  Result<std::unique_ptr<EngineClient>> engine = factory(options);
  if (!engine.ok()) {
    LogError("engine: {}", engine.status().ToString());
    return 1;
  }
  if (options.server.disaggregation.mode != server::DisaggregationMode::kNull && (*engine)->kv_fingerprint().empty()) {
    LogError("--disaggregation-mode {}: the {} backend cannot export or import KV pages", options.disaggregation_mode,
             options.device);
    return 1;
  }
  server::Server server(options.server, **engine, *tokenizer);
  server.SetKvTransfer(transfer->sender.get(), transfer->receiver.get());
  if (Status s = server.Start(); !s.ok()) {
    LogError("{}", s.ToString());
    return 1;
  }
  LogInfo("serving {} on http://{}:{} (ready {:.1f} s after start)", options.server.model_name,
          options.server.host, server.port(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (options.server.metrics_port) {
    LogInfo("metrics on http://{}:{}/metrics", options.server.host, server.metrics_port());
  }
  std::optional<StatsLogger> stats;
  if (!options.disable_log_stats) stats.emplace(**engine, server, options.log_stats_interval_s);
  // The first SIGINT/SIGTERM drains (readiness false, in-flight requests finish or are
  // aborted after the drain timeout); a second one ends the drain now (open streams still get
  // their final error event and [DONE]); a third stops at once.
  boost::asio::io_context signals_io;
  boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  std::thread drainer;
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    LogInfo("draining (up to {} ms)", options.server.timeouts.drain.count());
    drainer = std::thread([&] {
      server.Drain();
      signals_io.stop();
    });
    signals.async_wait([&](const boost::system::error_code& again, int) {
      if (again) return;
      LogInfo("ending the drain: aborting what still runs");
      server.EndDrain();
      signals.async_wait([&](const boost::system::error_code& third, int) {
        if (!third) server.Stop();
      });
    });
  });
  // A dead rank (or an engine that cannot run any more) ends the process with an error: the
  // streams it broke got their error events, then the server stops.
  int exit_code = 0;
  std::atomic<bool> watching{true};
  std::thread watcher;
  if (parallel.is_distributed()) {
    watcher = std::thread([&] {
      while (watching) {
        const std::string fatal = (*engine)->Stats().fatal_error;
        if (rank_died || !fatal.empty()) {
          LogError("a rank of the model is gone{}{}; stopping", fatal.empty() ? "" : ": ", fatal);
          exit_code = 1;
          // A GPU group's collectives do not time out: a step waiting on the dead rank never
          // returns, so the process ends on its own if the orderly stop below hangs.
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::seconds(10));
            LogError("the engine did not stop after the rank failure; exiting");
            std::_Exit(1);
          }).detach();
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          server.Stop();
          signals_io.stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }

  signals_io.run();
  if (ranks != nullptr) ranks->ExpectExit();
  watching = false;
  if (watcher.joinable()) watcher.join();
  if (drainer.joinable()) drainer.join();
  stats.reset();
  LogInfo("stopped");
  return exit_code;
}

void AddServeCommand(CLI::App& app, EngineFactory factory, RankRunner rank_runner, std::vector<std::string> argv) {
  auto options = std::make_shared<ServeOptions>();
  options->argv = std::move(argv);
  auto drain_seconds = std::make_shared<double>(30.0);
  auto idle_seconds = std::make_shared<double>(60.0);
  auto enable_prefix_caching = std::make_shared<bool>(true);
  auto metrics_prefix = std::make_shared<std::string>("peregrine");
  auto metrics_port = std::make_shared<int>(-1);
  server::ServerConfig& s = options->server;
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->set_version_flag("--version", std::string(kVersion));
  cmd->add_option("--model-path", options->model_path,
                  "Model directory (config.json + safetensors); default: the embedded demo model");
  cmd->add_option("--tokenizer", options->tokenizer_path,
                  "tokenizer.json or its directory (default: the model directory)");
  cmd->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", s.api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health and /ready")
      ->envname("PEREGRINE_API_KEY");
  cmd->add_option("--served-model-name", s.model_name, "Model id in the API and metrics")
      ->capture_default_str();
  cmd->add_option("--metrics-prefix", *metrics_prefix,
                  "Metric names: peregrine (peregrine:*, a model_name label) or vllm (vLLM's vllm:* names and "
                  "model_name/engine labels, for existing vLLM dashboards)")
      ->check(CLI::IsMember({"peregrine", "vllm"}))->capture_default_str();
  cmd->add_option("--metrics-port", *metrics_port,
                  "Serve /metrics (and /health) on this port of --host instead of the API port (0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_flag("--thinking", s.default_thinking,
                "Thinking mode unless a request sets chat_template_kwargs.thinking");
  cmd->add_option("--threads", options->threads, "CPU backend threads")->check(CLI::Range(1, 256));
  cmd->add_option("--device", options->device, "Backend: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_flag("--synthetic-weights", options->synthetic_weights,
                "Random weights for --model-path's config.json (generated on the device with cuda); "
                "without --model-path, the random-weights demo model (for speed runs) instead of the trained one");
  cmd->add_option("--num-layers", options->num_layers, "Keep only the first N layers (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  cmd->add_option("--max-model-len", options->max_model_len,
                  "Longest context of a sequence (0: the model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--expert-format", options->expert_format,
                  "CUDA routed experts: bf16 or mxfp4 (read as stored, quantised at load, or generated)")
      ->check(CLI::IsMember({"bf16", "mxfp4"}))->capture_default_str();
  cmd->add_option("--dense-format", options->dense_format,
                  "CUDA dense projections: bf16, or fp8 (e4m3 with 128x128 block scales)")
      ->check(CLI::IsMember({"bf16", "fp8"}))->capture_default_str();
  cmd->add_flag("--enforce-eager,--disable-cuda-graph", options->enforce_eager,
                "CUDA: launch every op, no decode graphs");
  cmd->add_flag("--host-sampling", options->host_sampling, "CUDA: copy the logits and sample on the host");
  cmd->add_flag("--disable-overlap-schedule", options->disable_overlap_schedule,
                "CUDA: wait for each step's tokens before planning the next (no CPU/GPU overlap)");
  cmd->add_flag("--enable-deterministic-inference", options->enable_deterministic_inference,
                "Batch-invariant kernels: a request's tokens and logprobs are the same alone or in any batch "
                "(CUDA, slower; the CPU backend always is)");
  cmd->add_option("--speculative-algorithm", options->speculative_algorithm,
                  "Speculative decoding: mtp (the checkpoint's drafter chained: its MTP layer, or its DSpark "
                  "block drafter, CPU only), ddtree (DDTree draft trees over its top-k; the block drafter's CPU "
                  "only), ngram (prompt "
                  "lookup: chains copied from the sequence's earlier tokens, no drafter model) or none");
  cmd->add_option("--speculative-num-steps", options->speculative_num_steps, "Draft depth")->capture_default_str();
  cmd->add_option("--speculative-num-draft-tokens", options->speculative_num_draft_tokens,
                  "Tokens verified per step, the newest one included (0: num-steps + 1; ddtree: the tree's budget)")
      ->capture_default_str();
  cmd->add_option("--speculative-eagle-topk", options->speculative_eagle_topk, "ddtree: candidates per depth")
      ->capture_default_str();
  cmd->add_option("--speculative-ngram-min-match-window-size", options->speculative_ngram_min_match,
                  "ngram: the shortest suffix of the sequence matched against its earlier tokens")
      ->capture_default_str();
  cmd->add_option("--speculative-ngram-max-match-window-size", options->speculative_ngram_max_match,
                  "ngram: the longest suffix matched (the longest that occurs earlier wins)")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs,--max-running-requests", options->max_num_seqs, "Running sequences per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-num-batched-tokens,--chunked-prefill-size", options->max_num_batched_tokens,
                  "Token budget per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--long-prefill-token-threshold", options->long_prefill_token_threshold,
                  "While requests wait, a prefill chunk takes at most this many tokens (0: no cap)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--max-num-waiting", options->max_num_waiting,
                  "Engine waiting queue; beyond it requests get 429")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--kv-cache-tokens", options->kv_cache_tokens,
                  "Tokens of context the KV blocks hold (default: CPU 262144, CUDA what "
                  "--gpu-memory-utilization leaves)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--gpu-memory-utilization,--mem-fraction-static", options->gpu_memory_utilization,
                  "CUDA: fraction of the device's memory for weights, workspaces and the KV pools")
      ->check(CLI::Range(0.05, 1.0))->capture_default_str();
  cmd->add_option("--block-size", options->block_size,
                  "Tokens per KV block, the prefix cache's granularity (rounded up to a multiple of the "
                  "window and the compress ratios)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  auto* enable = cmd->add_flag("--enable-prefix-caching", *enable_prefix_caching,
                               "Share KV blocks between requests with a common prefix (the default)");
  cmd->add_flag("--disable-prefix-caching,--disable-radix-cache", options->disable_prefix_caching,
                "No prefix caching")
      ->excludes(enable);
  cmd->add_option("--kv-snapshot-fraction", options->kv_snapshot_fraction,
                  "Share of the KV memory for prefix-cache snapshots (the state at block boundaries)")
      ->check(CLI::Range(0.0, 0.9))->capture_default_str();
  cmd->add_option("--io-threads", s.num_io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--worker-threads", s.num_worker_threads,
                  "Threads parsing, rendering and tokenizing requests")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--max-concurrent-requests", s.limits.max_concurrent_requests,
                  "Generation requests in flight; beyond it 429")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cmd->add_option("--max-body-bytes", s.limits.max_body_bytes, "Request body limit (413 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 34))->capture_default_str();
  cmd->add_option("--max-connections", s.limits.max_connections, "Open connections")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cmd->add_option("--max-n", s.limits.max_n, "Largest n per request")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--drain-timeout", *drain_seconds,
                  "Seconds in-flight requests may finish after SIGTERM")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->add_option("--idle-timeout", *idle_seconds, "Seconds an idle keep-alive connection stays")
      ->check(CLI::Range(0.1, 86400.0))->capture_default_str();
  cmd->add_option("--disaggregation-mode", options->disaggregation_mode,
                  "Prefill/decode disaggregation: null (serve whole requests), prefill (compute prompts and "
                  "publish their KV for a decode server) or decode (pull the KV and generate)")
      ->check(CLI::IsMember({"null", "prefill", "decode"}))->capture_default_str();
  cmd->add_option("--disaggregation-transfer-backend", options->disaggregation_transfer_backend,
                  "KV transfer: ucx (pages through host memory, over TCP or shared memory) or cuda_ipc (prefill "
                  "and decode on one host with CUDA: pages stay in device memory and the decode server copies "
                  "them over CUDA IPC; UCX carries the meta). A decode server takes either")
      ->check(CLI::IsMember({"ucx", "cuda_ipc"}))->capture_default_str();
  cmd->add_option("--disaggregation-bootstrap-host", options->disaggregation_bootstrap_host,
                  "prefill: the interface the KV transfer port is bound to (default: --host)");
  cmd->add_option("--disaggregation-bootstrap-port", options->disaggregation_bootstrap_port,
                  "prefill: the KV transfer port (0: any free port)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--disaggregation-secret-file", options->disaggregation_secret_file,
                  "The deployment's shared secret for the KV transfer (or PEREGRINE_DISAGGREGATION_SECRET); "
                  "peers without it get nothing");
  cmd->add_option("--disaggregation-failure-policy", options->disaggregation_failure_policy,
                  "decode: when a KV transfer fails, recompute the prompt here or fail the request")
      ->check(CLI::IsMember({"recompute", "fail"}))->capture_default_str();
  cmd->add_option("--disaggregation-transfer-timeout-secs", options->disaggregation_transfer_timeout_s,
                  "decode: how long a request waits for its KV; prefill: how long a published KV waits to be pulled")
      ->check(CLI::Range(0.1, 86400.0))->capture_default_str();
  cmd->add_option("--disaggregation-max-held-gb", options->disaggregation_max_held_gb,
                  "prefill: host memory for published KV not pulled yet; past it the oldest rooms are dropped")
      ->check(CLI::Range(0.001, 65536.0))->capture_default_str();
  cmd->add_option("--disaggregation-staging-gb", options->disaggregation_staging_gb,
                  "prefill over cuda_ipc: device memory (within --gpu-memory-utilization) for published KV not "
                  "pulled yet; a request whose KV does not fit goes through host memory")
      ->check(CLI::Range(0.001, 4096.0))->capture_default_str();
  AddCompatFlags(*cmd, *options);
  cmd->add_option("--ep,--expert-parallel-size,--ep-size", options->expert_parallel_size,
                  "Partition the routed experts over the tensor-parallel ranks (1, or equal to --tp)")
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--enable-expert-parallel", options->enable_expert_parallel, "vLLM's spelling of --ep equal to --tp");
  cmd->add_option("--nnodes", options->nnodes, "Nodes the ranks span (--tp is over all of them)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--node-rank", options->node_rank, "This node's index; node 0 serves HTTP")
      ->check(CLI::Range(0, 63))->capture_default_str();
  cmd->add_option("--dist-init-addr", options->dist_init_addr,
                  "host:port where the ranks meet (node 0 listens there; default: a free loopback port)");
  cmd->add_flag("--enable-custom-all-reduce", options->enable_custom_all_reduce,
                "GPU ranks of one node: small bf16/f32 sums through the CUDA-IPC one-shot/two-shot kernel "
                "(experimental: not yet run on two GPUs), the rest through NCCL");
  cmd->add_flag("--disable-custom-all-reduce", options->disable_custom_all_reduce,
                "GPU ranks: every all-reduce through NCCL (the default; vLLM's and SGLang's flag)");
  cmd->add_option("--rank", options->rank, "")->group("");  // set on the ranks serve starts
  cmd->callback([options, drain_seconds, idle_seconds, metrics_prefix, metrics_port, factory = std::move(factory),
                 rank_runner = std::move(rank_runner)] {
    options->server.metrics_naming =
        *metrics_prefix == "vllm" ? server::MetricsNaming::kVllm : server::MetricsNaming::kPeregrine;
    if (*metrics_port >= 0) options->server.metrics_port = static_cast<uint16_t>(*metrics_port);
    if (options->quantization == "fp8") options->dense_format = "fp8";
    options->server.log_requests = !options->disable_log_requests;
    options->server.timeouts.drain =
        std::chrono::milliseconds(static_cast<int64_t>(*drain_seconds * 1000));
    options->server.timeouts.idle =
        std::chrono::milliseconds(static_cast<int64_t>(*idle_seconds * 1000));
    options->server.disaggregation.mode = options->disaggregation_mode == "prefill" ? server::DisaggregationMode::kPrefill
                                          : options->disaggregation_mode == "decode"
                                              ? server::DisaggregationMode::kDecode
                                              : server::DisaggregationMode::kNull;
    options->server.disaggregation.failure_policy = options->disaggregation_failure_policy == "fail"
                                                        ? server::DisaggregationFailurePolicy::kFail
                                                        : server::DisaggregationFailurePolicy::kRecompute;
    options->server.limits.max_choices =
        std::max(options->server.limits.max_choices, options->server.limits.max_n);
    const int rc = RunServe(*options, factory, rank_runner);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
