#include "cli/profile_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/engine_factory.h"
#ifdef PEREGRINE_WITH_CUDA
#include "backend/cuda/cuda_status.h"
#include "kernels/common/kv_fp8_row.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/device_executor.h"
#endif

namespace peregrine::cli {

namespace {

struct ProfileFlags {
  EngineOptions engine;
  std::vector<int64_t> batch_sizes = {1, 16, 64};
  int64_t context = 4096;  // position of the decode tokens
  int steps = 20;          // timed graph replays per batch size
  std::string out;         // JSON lines
  double bandwidth_tbs = 4.3;
  // > 0: also time speculative verify steps of draft chains of this many tokens per sequence
  // (the root and T - 1 drafts), each followed by its commit, against the decode step.
  int64_t verify_tokens = 0;
};

#ifdef PEREGRINE_WITH_CUDA
// Bytes one decode step must read per layer at batch b: every dense weight once, the routed
// experts the batch touches (expected count for uniform routing), and the KV rows. With
// `dense_fp8` the FP8 projections (wq_a, wq_b, wkv, wo_b, indexer wq_b, shared expert) count
// one byte per weight (plus a 4-byte scale per 128x128 block). A compressed entry is
// `entry_bytes` (bf16 rows, or --kv-cache-dtype fp8's rows); window rows are bf16.
double LayerBytes(const ModelConfig& c, int64_t layer, int64_t b, int64_t context, bool mxfp4, bool dense_fp8,
                  double entry_bytes) {
  const double d = static_cast<double>(c.hidden_size);
  const double hd = static_cast<double>(c.head_dim);
  const double h = static_cast<double>(c.num_heads);
  double params = h * hd * c.o_lora_rank;  // wo_a (bf16)
  double fp8_params = d * c.q_lora_rank + static_cast<double>(c.q_lora_rank) * h * hd + d * hd +
                      static_cast<double>(c.o_groups) * c.o_lora_rank * d;
  const int64_t ratio = c.CompressRatio(layer);
  const bool csa = c.layer_types[static_cast<size_t>(layer)] == AttentionType::kCompressedSparse;
  if (ratio > 0) params += 2.0 * (csa ? 2 : 1) * hd * d;
  if (csa) {
    params += d * c.index_n_heads + 4.0 * c.index_head_dim * d;
    fp8_params += static_cast<double>(c.q_lora_rank) * c.index_n_heads * c.index_head_dim;
  }
  const double inter = static_cast<double>(c.moe_intermediate_size);
  params += d * c.num_experts;
  fp8_params += 3.0 * d * inter * c.num_shared_experts;
  const double e = static_cast<double>(c.num_experts);
  const double touched = e * (1.0 - std::pow(1.0 - static_cast<double>(c.num_experts_per_tok) / e, static_cast<double>(b)));
  const double expert_bytes = touched * 3.0 * d * inter * (mxfp4 ? 0.5 + 1.0 / 32.0 : 2.0);
  const double window_rows = static_cast<double>(std::min(c.sliding_window, context));
  double entries = 0.0;
  if (ratio > 0) entries = csa ? static_cast<double>(std::min(c.index_topk, context / ratio))
                               : static_cast<double>(context / ratio);
  double kv_bytes = static_cast<double>(b) * (window_rows * hd * 2.0 + entries * entry_bytes);
  if (csa) kv_bytes += static_cast<double>(b) * (context / ratio) * c.index_head_dim * 2.0;
  const double fp8_bytes = fp8_params * (dense_fp8 ? 1.0 + 4.0 / (128.0 * 128.0) : 2.0);
  return params * 2.0 + fp8_bytes + expert_bytes + kv_bytes;
}

int Run(const ProfileFlags& f) {
  auto source = OpenModel(f.engine);
  if (!source.ok()) {
    std::fprintf(stderr, "error: %s\n", source.status().ToString().c_str());
    return 1;
  }
  const ModelConfig config = source->config;
  const int64_t max_b = *std::max_element(f.batch_sizes.begin(), f.batch_sizes.end());
  DeviceModelRegistry registry;
  deepseek_v4::cuda::RegisterDeviceModel(registry);
  auto factory = registry.Find(config.model_type);
  if (!factory.ok()) {
    std::fprintf(stderr, "error: %s\n", factory.status().ToString().c_str());
    return 1;
  }
  ExecutorOptions o;
  const int64_t verify = std::max<int64_t>(f.verify_tokens, 0);
  o.num_slots = max_b;
  o.max_tokens = max_b * std::max<int64_t>(verify, 1);
  o.max_logit_rows = o.max_tokens;
  o.max_verify_rows = verify > 0 ? max_b * verify : 0;
  o.max_context = f.context + std::max<int64_t>(2, verify + 1);
  o.block_tokens = f.engine.block_size;
  o.prefix_caching = false;
  o.weights.synthetic = f.engine.synthetic_weights;
  o.weights.seed = 20260424;
  o.weights.expert_format = f.engine.expert_format;
  o.weights.dense_format = f.engine.dense_format;
  o.batch_invariant = f.engine.deterministic_inference;
  o.kv_cache_fp8 = f.engine.kv_cache_dtype == "fp8";
  const bool mxfp4 = f.engine.expert_format == "mxfp4";
  const bool dense_fp8 = f.engine.dense_format == "fp8";
  const double entry_bytes =
      o.kv_cache_fp8 ? kernels::KvFp8RowLayout{static_cast<int>(config.head_dim), static_cast<int>(config.rope_head_dim)}
                           .row_bytes()
                     : 2.0 * static_cast<double>(config.head_dim);
  // Blocks for every sequence at the profiled context, each its own.
  {
    const KvLayout layout = deepseek_v4::KvGeometry::For(config, o.block_tokens, {2, 2}).Layout();
    o.kv_tokens = max_b * std::max<int64_t>(layout.BlocksFor(o.max_context), 1) * layout.block_tokens;
  }
  const auto start = std::chrono::steady_clock::now();
  auto executor = DeviceExecutor::Create(config, *source->checkpoint, *factory, o);
  if (!executor.ok()) {
    std::fprintf(stderr, "error: %s\n", executor.status().ToString().c_str());
    return 1;
  }
  DeviceExecutor& model = **executor;
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const KvCapacity& kv = model.kv_capacity();
  const int64_t blocks_per_seq = kv.layout.BlocksFor(o.max_context);
  std::printf("model: %lld layers, %.2f GB weights (%s experts, %s dense%s%s), %.2f GB KV pools, ready in %.1f s\n",
              static_cast<long long>(config.num_layers), static_cast<double>(model.weight_bytes()) / 1e9,
              mxfp4 ? "MXFP4" : "bf16", f.engine.dense_format.c_str(),
              o.batch_invariant ? ", batch-invariant kernels" : "", o.kv_cache_fp8 ? ", FP8 KV" : "",
              static_cast<double>(PoolBytes(kv).total()) / 1e9, load_s);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(max_b));
  for (int64_t i = 0; i < max_b; ++i)
    for (int64_t j = 0; j < blocks_per_seq; ++j)
      tables[static_cast<size_t>(i)].push_back(static_cast<int32_t>(i * blocks_per_seq + j));
  std::ofstream out;
  if (!f.out.empty()) out.open(f.out, std::ios::app);

  for (int64_t b : f.batch_sizes) {
    std::vector<int32_t> tokens(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % config.vocab_size);
    std::vector<ChunkView> chunks;
    for (int64_t i = 0; i < b; ++i) {
      ChunkView v;
      v.slot = static_cast<int32_t>(i);
      v.first_position = f.context;
      v.num_tokens = 1;
      v.tokens = std::span<const int32_t>(&tokens[static_cast<size_t>(i)], 1);
      v.blocks = tables[static_cast<size_t>(i)];
      v.needs_logits = true;
      chunks.push_back(v);
    }
    // Op-by-op profile (second run: the first warms cuBLAS and the allocator).
    std::vector<OpProfile> ops;
    double eager_ms = 0.0;
    for (int rep = 0; rep < 2; ++rep) {
      const Status s = model.ProfileForward(chunks, &ops, &eager_ms);
      if (!s.ok()) {
        std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    // Graphed steps: wall time per step (plan, metadata upload, graph, sync). The logits
    // stay on the device, as when the server samples there.
    const auto keep_on_device = [](const Tensor&, cudaStream_t) { return Status::Ok(); };
    auto step = [&] {
      PG_RETURN_IF_ERROR(model.Launch(chunks, keep_on_device));
      PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(model.stream()));
      return Status::Ok();
    };
    Status s = model.EnableGraphs(max_b);
    for (int rep = 0; s.ok() && rep < 3; ++rep) s = step();
    std::vector<double> times, host;
    for (int rep = 0; s.ok() && rep < f.steps; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      s = step();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      host.push_back(model.last_host_ms());
    }
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 1;
    }
    std::sort(times.begin(), times.end());
    std::sort(host.begin(), host.end());
    const double graph_ms = times[times.size() / 2];
    const double host_ms = host[host.size() / 2];
    double busy = 0.0;
    for (const auto& op : ops) busy += op.ms;
    std::printf("\nbatch %lld at context %lld: graphed step %.3f ms (median of %d), eager step %.3f ms, "
                "GPU busy %.3f ms -> idle %.1f%% of the graphed step; host work before the launch %.3f ms "
                "(%.1f%% of the step; the server plans and launches the next step while the GPU runs this one, and "
                "exports the GPU's remaining idle time as peregrine:device_idle_seconds_total)\n",
                static_cast<long long>(b), static_cast<long long>(f.context), graph_ms, f.steps, eager_ms, busy,
                100.0 * std::max(0.0, 1.0 - busy / graph_ms), host_ms, 100.0 * host_ms / graph_ms);
    std::printf("  %-20s %10s %8s %9s\n", "op", "ms", "%", "launches");
    for (const auto& op : ops) {
      if (op.launches == 0) continue;
      std::printf("  %-20s %10.4f %7.1f%% %9lld\n", op.name.c_str(), op.ms, 100.0 * op.ms / busy,
                  static_cast<long long>(op.launches));
    }
    double layer_bytes = 0.0;
    for (int64_t l = 0; l < config.num_layers; ++l)
      layer_bytes += LayerBytes(config, l, b, f.context, mxfp4, dense_fp8, entry_bytes);
    layer_bytes /= static_cast<double>(config.num_layers);
    double head_ms = 0.0;
    for (const auto& op : ops)
      if (op.name == "head" || op.name == "embedding") head_ms += op.ms;
    const double layer_ms = (busy - head_ms) / static_cast<double>(config.num_layers);
    const double roof_ms = layer_bytes / (f.bandwidth_tbs * 1e12) * 1e3;
    std::printf("  per layer: %.4f ms GPU time, roofline %.4f ms (%.1f MB at %.1f TB/s) -> %.2fx the roofline\n",
                layer_ms, roof_ms, layer_bytes / 1e6, f.bandwidth_tbs, layer_ms / roof_ms);
    // The graphed step has no per-op times: a layer's share is the step less the host work and
    // the head and embedding as timed eagerly (an estimate; the eager ops carry their own gaps).
    const double graph_layer_ms = (graph_ms - host_ms - head_ms) / static_cast<double>(config.num_layers);
    std::printf("  per layer in the graph: ~%.4f ms (graphed step less host work, head and embedding) -> %.2fx the "
                "roofline\n",
                graph_layer_ms, graph_layer_ms / roof_ms);
    if (verify > 0) {
      // Verify steps: each sequence's chain of `verify` tokens at the same position, then the
      // commit of its root (every draft rejected: the most restores), graphed like the server's.
      std::vector<int32_t> chain_tokens(static_cast<size_t>(b * verify)), parents(static_cast<size_t>(verify));
      for (int64_t i = 0; i < b * verify; ++i)
        chain_tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % config.vocab_size);
      for (int64_t j = 0; j < verify; ++j) parents[static_cast<size_t>(j)] = static_cast<int32_t>(j - 1);
      std::vector<ChunkView> chains = chunks;
      std::vector<TreeCommit> commits;
      for (int64_t i = 0; i < b; ++i) {
        ChunkView& v = chains[static_cast<size_t>(i)];
        v.num_tokens = verify;
        v.tokens = std::span<const int32_t>(chain_tokens).subspan(static_cast<size_t>(i * verify), static_cast<size_t>(verify));
        v.tree_parents = parents;
        commits.push_back({v.slot, {0}});
      }
      auto verify_step = [&] {
        PG_RETURN_IF_ERROR(model.Launch(chains, keep_on_device));
        PG_RETURN_IF_ERROR(model.CommitTrees(commits));
        PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(model.stream()));
        return Status::Ok();
      };
      std::vector<double> verify_times;
      for (int rep = 0; s.ok() && rep < 3; ++rep) s = verify_step();
      for (int rep = 0; s.ok() && rep < f.steps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        s = verify_step();
        verify_times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      if (!s.ok()) {
        std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
        return 1;
      }
      std::sort(verify_times.begin(), verify_times.end());
      const double verify_ms = verify_times[verify_times.size() / 2];
      // What the wider step must read at least: the experts b * T tokens touch, T times the KV rows.
      double verify_bytes = 0.0;
      for (int64_t l = 0; l < config.num_layers; ++l)
        verify_bytes += LayerBytes(config, l, b * verify, f.context, mxfp4, dense_fp8, entry_bytes);
      verify_bytes /= static_cast<double>(config.num_layers);
      std::printf("  verify: %lld tokens per sequence, graphed step + commit %.3f ms (median of %d) = %.2fx the decode "
                  "step; its roofline is %.2fx the decode step's (%.1f MB per layer)\n",
                  static_cast<long long>(verify), verify_ms, f.steps, verify_ms / graph_ms, verify_bytes / layer_bytes,
                  verify_bytes / 1e6);
      if (out.is_open())
        out << "{\"bench\":\"verify_step\",\"batch\":" << b << ",\"context\":" << f.context
            << ",\"num_layers\":" << config.num_layers << ",\"experts\":\"" << (mxfp4 ? "mxfp4" : "bf16")
            << "\",\"verify_tokens\":" << verify << ",\"verify_step_ms\":" << verify_ms
            << ",\"decode_step_ms\":" << graph_ms << ",\"ratio\":" << verify_ms / graph_ms
            << ",\"roofline_ratio\":" << verify_bytes / layer_bytes << "}\n";
    }
    if (out.is_open()) {
      out << "{\"bench\":\"decode_step\",\"batch\":" << b << ",\"context\":" << f.context
          << ",\"num_layers\":" << config.num_layers << ",\"experts\":\"" << (mxfp4 ? "mxfp4" : "bf16")
          << "\",\"dense\":\"" << f.engine.dense_format
          << "\",\"batch_invariant\":" << (o.batch_invariant ? "true" : "false")
          << ",\"kv_cache_dtype\":\"" << (o.kv_cache_fp8 ? "fp8" : "bf16") << "\""
          << ",\"graph_step_ms\":" << graph_ms << ",\"eager_step_ms\":" << eager_ms << ",\"busy_ms\":" << busy
          << ",\"idle_fraction\":" << std::max(0.0, 1.0 - busy / graph_ms) << ",\"host_ms\":" << host_ms
          << ",\"layer_ms\":" << layer_ms << ",\"graph_layer_ms\":" << graph_layer_ms
          << ",\"layer_roofline_ms\":" << roof_ms << ",\"layer_bytes\":" << layer_bytes << ",\"load_s\":" << load_s
          << ",\"ops\":{";
      bool first = true;
      for (const auto& op : ops) {
        if (op.launches == 0) continue;
        out << (first ? "" : ",") << "\"" << op.name << "\":" << op.ms;
        first = false;
      }
      out << "}}\n";
    }
  }
  return 0;
}
#endif

}  // namespace

void AddProfileCommand(CLI::App& app) {
  auto f = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand("profile", "Per-op GPU time of decode steps on the CUDA backend");
  cmd->add_option("--model-path", f->engine.model_path, "Model directory (config.json; default: the demo model)");
  cmd->add_flag("--synthetic-weights", f->engine.synthetic_weights, "Random weights generated on the device");
  cmd->add_option("--num-layers", f->engine.num_layers, "Keep only the first N layers (0: all)");
  cmd->add_option("--expert-format", f->engine.expert_format, "Routed experts: bf16 or mxfp4")
      ->check(CLI::IsMember({"bf16", "mxfp4"}));
  cmd->add_option("--dense-format", f->engine.dense_format, "Dense projections: bf16 or fp8")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_flag("--enable-deterministic-inference", f->engine.deterministic_inference,
                "Batch-invariant kernels (their cost is what this measures)");
  cmd->add_option("--kv-cache-dtype", f->engine.kv_cache_dtype, "auto, or fp8: compressed entries in V4's FP8 rows")
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--batch-sizes", f->batch_sizes, "Decode batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--context", f->context, "Position of the decode tokens")->capture_default_str();
  cmd->add_option("--steps", f->steps, "Timed graphed steps per batch size")->check(CLI::Range(1, 100000));
  cmd->add_option("--bandwidth", f->bandwidth_tbs, "Roofline bandwidth in TB/s")->capture_default_str();
  cmd->add_option("--out", f->out, "Append JSON lines to this file");
  cmd->add_option("--verify-tokens", f->verify_tokens,
                  "Also time speculative verify steps of draft chains this long (root included) against the "
                  "decode step")
      ->check(CLI::Range(int64_t{0}, int64_t{17}));
  cmd->callback([f] {
#ifdef PEREGRINE_WITH_CUDA
    const int rc = Run(*f);
#else
    std::fprintf(stderr, "error: this build has no CUDA backend\n");
    const int rc = 1;
#endif
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
