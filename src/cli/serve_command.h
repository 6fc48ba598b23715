// `peregrine serve`: the OpenAI-compatible HTTP server in front of an engine. The engine is
// built by a factory the caller provides, so this command knows nothing about models.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "distributed/parallel_config.h"
#include "distributed/tcp_store.h"
#include "engine/engine_client.h"
#include "server/server_config.h"

namespace peregrine::cli {

struct ServeOptions {
  std::string model_path;                 // checkpoint directory; "demo" or empty: the demo model
  std::string tokenizer_path;             // tokenizer.json or its directory; default: model_path
  // Engine knobs, read by the factory.
  int threads = 2;                        // CPU backend threads
  int64_t max_num_seqs = 256;             // running sequences per step
  int64_t max_num_batched_tokens = 2048;  // token budget per step
  int64_t max_num_waiting = 4096;         // bounded waiting queue (full: 429)
  int64_t long_prefill_token_threshold = 0;  // > 0: prefill chunks capped while requests wait
  int64_t kv_cache_tokens = 0;            // > 0: tokens of context the KV blocks hold
  int64_t block_size = 256;               // tokens per KV block
  bool disable_prefix_caching = false;
  double kv_snapshot_fraction = 0.1;      // of the KV blocks' bytes, for prefix-cache snapshots
  double gpu_memory_utilization = 0.9;    // CUDA: fraction of device memory for weights, state and KV
  std::string device = "cpu";             // cpu or cuda
  bool synthetic_weights = false;         // random weights for --model-path's config.json
  int64_t num_layers = 0;                 // > 0: only the first layers
  int64_t max_model_len = 0;              // > 0: context per sequence
  std::string expert_format = "bf16";     // CUDA routed experts: bf16 or mxfp4
  std::string dense_format = "bf16";      // CUDA dense projections: bf16 or fp8
  bool enforce_eager = false;             // CUDA: no decode graphs
  bool host_sampling = false;             // CUDA: copy logits and sample on the host
  bool disable_overlap_schedule = false;  // CUDA: wait for each step before planning the next
  bool enable_deterministic_inference = false;  // batch-invariant kernels (SGLang's flag)
  // Speculative decoding (SGLang's flags): mtp, ddtree or none; depth, tokens verified per
  // step (root included; 0: depth + 1) and candidates per depth for trees.
  std::string speculative_algorithm;
  int32_t speculative_num_steps = 3;
  int32_t speculative_num_draft_tokens = 0;
  int32_t speculative_eagle_topk = 4;
  int32_t speculative_ngram_min_match = 1;
  int32_t speculative_ngram_max_match = 12;
  // vLLM/SGLang spellings (cli/compat_flags.h) and logging.
  int64_t tensor_parallel_size = 1;
  std::string dtype = "auto";
  std::string quantization;               // "fp8": --dense-format fp8
  std::string kv_cache_dtype = "auto";
  std::string chat_template;
  std::string reasoning_parser;
  std::string tool_call_parser;
  bool trust_remote_code = false;
  bool enable_chunked_prefill = false;
  std::string log_level = "info";
  bool disable_log_requests = false;
  bool enable_log_requests = false;
  bool disable_log_stats = false;
  double log_stats_interval_s = 10.0;     // seconds between stats lines while requests run
  // Prefill/decode disaggregation (SGLang's flags): null, prefill or decode; the prefill
  // side's KV transfer port (on bootstrap_host, default --host); the deployment's shared
  // secret (a file, or PEREGRINE_DISAGGREGATION_SECRET); the decode side's failure policy;
  // how long a transfer may take (decode) and a published room waits (prefill).
  std::string disaggregation_mode = "null";
  std::string disaggregation_transfer_backend = "ucx";
  std::string disaggregation_bootstrap_host;
  int disaggregation_bootstrap_port = 8998;
  std::string disaggregation_secret_file;
  std::string disaggregation_failure_policy = "recompute";
  double disaggregation_transfer_timeout_s = 60.0;
  double disaggregation_max_held_gb = 16.0;  // prefill: host memory for rooms not pulled yet
  double disaggregation_staging_gb = 2.0;    // prefill over cuda_ipc: device memory for rooms not pulled yet
  // Tensor/expert parallel (SGLang's flags; --tp above): routed experts partitioned over the
  // ranks (--ep equal to --tp, or vLLM's --enable-expert-parallel), nodes, this node's index,
  // rank 0's rendezvous host:port (default: a free loopback port on one node).
  int64_t expert_parallel_size = 1;
  bool enable_expert_parallel = false;
  int nnodes = 1;
  int node_rank = 0;
  std::string dist_init_addr;
  bool enable_custom_all_reduce = false;   // small GPU sums through the CUDA-IPC kernel
  bool disable_custom_all_reduce = false;  // every GPU all-reduce through NCCL (the default)
  int rank = -1;                  // hidden: the global rank serve gave a process it started
  std::vector<std::string> argv;  // this process's command line (other ranks start with it)
  // Set by RunServe on rank 0: the rendezvous it serves, started before the other ranks.
  std::shared_ptr<distributed::TcpStoreServer> rendezvous_server;
  server::ServerConfig server;

  distributed::ParallelConfig parallel() const;
};

// Builds a started engine for `options`, or says why it cannot.
using EngineFactory =
    std::function<Result<std::unique_ptr<EngineClient>>(const ServeOptions& options)>;

// Runs a rank other than 0 of a sharded model (no HTTP server); returns its exit code.
using RankRunner = std::function<int(const ServeOptions& options)>;

void AddServeCommand(CLI::App& app, EngineFactory factory, RankRunner rank_runner, std::vector<std::string> argv);

// Serves until SIGINT or SIGTERM, then drains (a second signal stops at once). Returns the
// process exit code: 0 after a clean drain, 1 when the engine, tokenizer or socket fails or a
// rank of a sharded model dies (the server turns not-ready and stops).
int RunServe(const ServeOptions& options, const EngineFactory& factory, const RankRunner& rank_runner);

}  // namespace peregrine::cli
