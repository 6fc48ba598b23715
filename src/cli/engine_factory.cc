#include "cli/engine_factory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "model/deepseek_v4/demo_model.h"
#include "model/synthetic_checkpoint.h"
#include "runtime/cpu_model_runner.h"
#ifdef PEREGRINE_WITH_CUDA
#include "runtime/cuda_model_runner.h"
#endif

namespace peregrine::cli {

namespace {

int32_t PagesFor(int64_t tokens, int64_t ratio, int32_t page_size) {
  const int64_t entries = tokens / ratio;
  return static_cast<int32_t>((entries + page_size - 1) / page_size);
}

constexpr uint64_t kSyntheticSeed = 20260424;  // the demo model's seed

Result<std::unique_ptr<ModelRunner>> MakeRunner(const EngineOptions& o, ModelSource source) {
  if (o.device == "cpu") {
    PG_ASSIGN_OR_RETURN(std::unique_ptr<deepseek_v4::Model> model,
                        deepseek_v4::Model::Create(std::move(source.config), std::move(source.checkpoint), o.threads));
    return std::unique_ptr<ModelRunner>(std::make_unique<CpuModelRunner>(std::move(model)));
  }
  if (o.device != "cuda") return InvalidArgument("unknown device '" + o.device + "' (cpu or cuda)");
#ifdef PEREGRINE_WITH_CUDA
  deepseek_v4::cuda::CudaModelOptions co;
  co.device = o.cuda_device;
  co.num_slots = o.max_num_seqs;
  co.max_tokens = o.max_num_batched_tokens;
  co.max_context = o.max_model_len > 0 ? o.max_model_len
                                        : std::min<int64_t>(source.config.max_position_embeddings, 8192);
  co.weights.synthetic_matrices = o.synthetic_weights;
  co.weights.seed = kSyntheticSeed;
  if (o.expert_format == "mxfp4") {
    co.weights.expert_format = deepseek_v4::cuda::ExpertFormat::kMXFP4;
  } else if (o.expert_format != "bf16") {
    return InvalidArgument("unknown expert format '" + o.expert_format + "' (bf16 or mxfp4)");
  }
  if (o.dense_format == "fp8") {
    co.weights.dense_format = deepseek_v4::cuda::DenseFormat::kFP8;
  } else if (o.dense_format != "bf16") {
    return InvalidArgument("unknown dense format '" + o.dense_format + "' (bf16 or fp8)");
  }
  const auto start = std::chrono::steady_clock::now();
  PG_ASSIGN_OR_RETURN(std::unique_ptr<deepseek_v4::cuda::CudaModel> model,
                      deepseek_v4::cuda::CudaModel::Create(std::move(source.config), *source.checkpoint, co));
  if (!o.enforce_eager) PG_RETURN_IF_ERROR(model->EnableGraphs(std::min<int64_t>(o.max_num_seqs, 256)));
  std::fprintf(stderr, "CUDA model: %.2f GB of weights, %.2f GB of state for %lld slots x %lld positions, loaded in %.1f s\n",
               static_cast<double>(model->weight_bytes()) / 1e9, static_cast<double>(model->state_bytes()) / 1e9,
               static_cast<long long>(co.num_slots), static_cast<long long>(co.max_context),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return std::unique_ptr<ModelRunner>(std::make_unique<CudaModelRunner>(std::move(model), o.device_sampling, o.overlap));
#else
  return Unimplemented("this build has no CUDA backend (nvcc was not found when it was built)");
#endif
}

}  // namespace

Result<ModelSource> OpenModel(const EngineOptions& o) {
  ModelSource source;
  if (o.model_path.empty()) {
    source.config = deepseek_v4::DemoModelConfig();
  } else {
    PG_ASSIGN_OR_RETURN(source.config, LoadModelConfig(o.model_path));
  }
  if (o.num_layers > 0 && o.num_layers < source.config.num_layers) {
    source.config.num_layers = o.num_layers;
    source.config.layer_types.resize(static_cast<size_t>(o.num_layers));
    source.config.mlp_layer_types.resize(static_cast<size_t>(o.num_layers));
  }
  PG_RETURN_IF_ERROR(ValidateModelConfig(source.config));
  if (o.model_path.empty() || o.synthetic_weights) {
    source.checkpoint = MakeSyntheticCheckpoint(source.config, kSyntheticSeed);
  } else {
    PG_ASSIGN_OR_RETURN(source.checkpoint, Checkpoint::Open(o.model_path));
  }
  return source;
}

Result<std::unique_ptr<Engine>> MakeEngine(const EngineOptions& o) {
  PG_ASSIGN_OR_RETURN(ModelSource source, OpenModel(o));
  const ModelConfig c = source.config;
  PG_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, MakeRunner(o, std::move(source)));
  EngineConfig config;
  config.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  config.scheduler.max_num_seqs = o.max_num_seqs;
  config.scheduler.max_num_waiting = o.max_num_waiting;
  KvCacheConfig& kv = config.kv_cache;
  kv.page_size = o.kv_page_size;
  kv.num_slots = static_cast<int32_t>(o.max_num_seqs);
  kv.csa_ratio = c.compress_ratio_csa;
  kv.hca_ratio = c.compress_ratio_hca;
  kv.has_csa = std::count(c.layer_types.begin(), c.layer_types.end(), AttentionType::kCompressedSparse) > 0;
  kv.has_hca = std::count(c.layer_types.begin(), c.layer_types.end(), AttentionType::kHeavilyCompressed) > 0;
  kv.num_csa_pages = PagesFor(o.kv_cache_tokens, kv.csa_ratio, kv.page_size);
  kv.num_hca_pages = PagesFor(o.kv_cache_tokens, kv.hca_ratio, kv.page_size);
  auto engine = std::make_unique<Engine>(config, std::move(runner));
  std::fprintf(stderr, "KV cache: %d ratio-4 pages, %d ratio-128 pages of %d entries; capacity %lld tokens of context\n",
               kv.num_csa_pages, kv.num_hca_pages, kv.page_size,
               static_cast<long long>(engine->Stats().kv_capacity_tokens));
  engine->Start();
  return engine;
}

}  // namespace peregrine::cli
