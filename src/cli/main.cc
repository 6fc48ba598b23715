// The `peregrine` binary: one entry point, one subcommand per file.
#include <CLI/CLI.hpp>

#include "base/log.h"
#include "base/version.h"
#include "cli/bench_command.h"
#include "cli/engine_factory.h"
#include "cli/generate_command.h"
#include "cli/profile_command.h"
#include "cli/rank_launch.h"
#include "cli/score_command.h"
#include "cli/render_chat_command.h"
#include "cli/router_command.h"
#include "cli/serve_command.h"
#include "cli/tokenize_command.h"

namespace {

// The engine knobs of `peregrine serve`'s flags.
peregrine::Result<peregrine::cli::EngineOptions> EngineOptionsOf(const peregrine::cli::ServeOptions& serve) {
  peregrine::cli::EngineOptions o;
  o.model_path = serve.model_path == "demo" ? "" : serve.model_path;
  o.threads = serve.threads;
  o.max_num_seqs = serve.max_num_seqs;
  o.max_num_batched_tokens = serve.max_num_batched_tokens;
  o.max_num_waiting = serve.max_num_waiting;
  o.long_prefill_token_threshold = serve.long_prefill_token_threshold;
  o.kv_cache_tokens = serve.kv_cache_tokens;
  o.block_size = serve.block_size;
  o.enable_prefix_caching = !serve.disable_prefix_caching;
  o.kv_snapshot_fraction = serve.kv_snapshot_fraction;
  o.gpu_memory_utilization = serve.gpu_memory_utilization;
  o.device = serve.device;
  o.synthetic_weights = serve.synthetic_weights;
  o.num_layers = serve.num_layers;
  o.max_model_len = serve.max_model_len;
  o.expert_format = serve.expert_format;
  o.dense_format = serve.dense_format;
  o.enforce_eager = serve.enforce_eager;
  o.device_sampling = !serve.host_sampling;
  o.overlap = !serve.disable_overlap_schedule;
  o.deterministic_inference = serve.enable_deterministic_inference;
  o.kv_cache_dtype = serve.kv_cache_dtype == "fp8" || serve.kv_cache_dtype == "fp8_e4m3" ? "fp8" : "auto";
  if (serve.disaggregation_mode == "prefill" && serve.disaggregation_transfer_backend == "cuda_ipc")
    o.kv_staging_bytes = static_cast<uint64_t>(serve.disaggregation_staging_gb * double(uint64_t{1} << 30));
  PG_ASSIGN_OR_RETURN(o.speculative.algorithm, peregrine::speculative::ParseAlgorithm(serve.speculative_algorithm));
  o.speculative.num_steps = serve.speculative_num_steps;
  o.speculative.num_draft_tokens = serve.speculative_num_draft_tokens;
  o.speculative.topk = serve.speculative_eagle_topk;
  o.speculative.ngram.min_match = serve.speculative_ngram_min_match;
  o.speculative.ngram.max_match = serve.speculative_ngram_max_match;
  o.parallel = serve.parallel();
  if (!serve.dist_init_addr.empty())
    PG_RETURN_IF_ERROR(peregrine::distributed::ParseHostPort(serve.dist_init_addr, &o.rendezvous_host, &o.rendezvous_port));
  o.rendezvous_server = serve.rendezvous_server;
  return o;
}

// `peregrine serve`: the model from --model-path, or the embedded demo.
peregrine::Result<std::unique_ptr<peregrine::EngineClient>> MakeServingEngine(
    const peregrine::cli::ServeOptions& serve) {
  PG_ASSIGN_OR_RETURN(peregrine::cli::EngineOptions o, EngineOptionsOf(serve));
  PG_ASSIGN_OR_RETURN(std::unique_ptr<peregrine::Engine> engine, peregrine::cli::MakeEngine(o));
  return std::unique_ptr<peregrine::EngineClient>(std::move(engine));
}

// A rank of a sharded model other than 0 (no HTTP server).
int RunServingRank(const peregrine::cli::ServeOptions& serve) {
  auto o = EngineOptionsOf(serve);
  if (!o.ok()) {
    peregrine::LogError("{}", o.status().message());
    return 1;
  }
  return peregrine::cli::RunModelRank(*o, serve.rank);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Peregrine: DeepSeek-V4 inference server"};
  app.set_version_flag("--version", std::string(peregrine::kVersion));
  app.require_subcommand(1);
  peregrine::cli::AddServeCommand(app, MakeServingEngine, RunServingRank, std::vector<std::string>(argv, argv + argc));
  peregrine::cli::AddGenerateCommand(app);
  peregrine::cli::AddTokenizerCommands(app);
  peregrine::cli::AddRenderChatCommand(app);
  peregrine::cli::AddBenchCommand(app);
  peregrine::cli::AddProfileCommand(app);
  peregrine::cli::AddScoreCommand(app);
  peregrine::cli::AddRouterCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
