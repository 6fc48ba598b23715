#include "cli/engine_factory.h"

#include <algorithm>
#include <cstdio>

#include "model/deepseek_v4/demo_model.h"
#include "runtime/cpu_model_runner.h"

namespace peregrine::cli {

namespace {

int32_t PagesFor(int64_t tokens, int64_t ratio, int32_t page_size) {
  const int64_t entries = tokens / ratio;
  return static_cast<int32_t>((entries + page_size - 1) / page_size);
}

}  // namespace

Result<std::unique_ptr<Engine>> MakeEngine(const EngineOptions& o) {
  std::unique_ptr<deepseek_v4::Model> model;
  if (o.model_path.empty()) {
    PG_ASSIGN_OR_RETURN(model, deepseek_v4::LoadDemoModel(o.threads));
  } else {
    PG_ASSIGN_OR_RETURN(model, deepseek_v4::Model::Load(o.model_path, o.threads));
  }
  const ModelConfig& c = model->config();
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
  auto engine = std::make_unique<Engine>(config, std::make_unique<CpuModelRunner>(std::move(model)));
  std::fprintf(stderr, "KV cache: %d ratio-4 pages, %d ratio-128 pages of %d entries; capacity %lld tokens of context\n",
               kv.num_csa_pages, kv.num_hca_pages, kv.page_size,
               static_cast<long long>(engine->Stats().kv_capacity_tokens));
  engine->Start();
  return engine;
}

}  // namespace peregrine::cli
